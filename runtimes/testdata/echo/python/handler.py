def handle(event, request):
    """Answers the event and request it was given, for the contract test."""
    return {"event": event, "request": request}
