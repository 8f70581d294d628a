def handle(event):
    return {"message": f"hello, {event.get('name')}"}
