'use strict';
exports.handle = (event) => ({ message: `hello, ${event.name}` });
