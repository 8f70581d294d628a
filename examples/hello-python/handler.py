"""The hello example for the Python runtimes (python3.11, python3.12)."""


def handle(event, request=None):
    """event is the JSON request body; request holds the HTTP method, path, query, headers
    and traceparent (a handler may take only event)."""
    name = event.get("name") or "world"
    return {"message": f"hello, {name}", "method": (request or {}).get("method")}
