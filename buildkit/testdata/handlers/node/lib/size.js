'use strict';
exports.sizeOf = (value) => String(value).length;
