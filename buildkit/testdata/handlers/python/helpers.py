def size_of(value):
    return len(str(value))
