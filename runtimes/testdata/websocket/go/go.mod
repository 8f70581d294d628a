module example.com/websockets

go 1.25.0

require (
	github.com/coder/websocket v1.8.15
	github.com/gorilla/websocket v1.5.3
	golang.org/x/net v0.58.0
)
