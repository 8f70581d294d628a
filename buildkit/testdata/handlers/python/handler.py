"""Test function for the Python wrapper."""
import time

from helpers import size_of


def handle(event, request):
    action = event.get("action")
    if action == "stream":
        return stream(event)
    if action == "astream":
        return astream(event)
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


def stream(event):
    """Yields count chunks delay seconds apart (SSE events with sse set); fails after the
    first with fail set."""
    if event.get("sse"):
        yield {"statusCode": 200, "headers": {"Content-Type": "text/event-stream", "X-Stream": "yes"}}
    for i in range(event.get("count", 3)):
        if i:
            time.sleep(event.get("delay", 0))
        if event.get("fail") and i == 1:
            raise ValueError("stream broke")
        if event.get("sse"):
            yield {"event": "tick", "id": str(i), "data": {"i": i}} if i % 2 == 0 else f"line {i}\nsecond"
        else:
            yield f"chunk {i}\n"


async def astream(event):
    import asyncio
    for i in range(event.get("count", 3)):
        if i:
            await asyncio.sleep(event.get("delay", 0))
        yield f"chunk {i}\n"
