// Answers the event and request it was given, for the contract test.
exports.handle = (event, request) => ({ event, request });
