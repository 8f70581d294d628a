'use strict';
// Baseline for the Node.js wrapper benchmark: node:http answering the same JSON.
const http = require('node:http');

http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const event = body.length ? JSON.parse(body) : {};
    const payload = JSON.stringify({ message: `hello, ${event.name}` });
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) }).end(payload);
  });
}).listen(Number(process.env.PORT), '127.0.0.1');
