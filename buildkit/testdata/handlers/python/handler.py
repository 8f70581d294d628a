"""Test function for the Python wrapper."""
import time

from helpers import size_of


def handle(event, request):
    action = event.get("action")
    if action == "text":
        return f"hello {event.get('name')}"
    if action == "error":
        raise ValueError("boom")
    if action == "sleep":
        time.sleep(event.get("seconds", 0))
        if event.get("marker"):
            with open(event["marker"], "w") as f:
                f.write("finished")
        return {"slept": event.get("seconds", 0)}
    if action == "respond":
        return event["response"]
    if action == "size":
        return {"bytes": size_of(event.get("data"))}
    return {"event": event, "request": request}
