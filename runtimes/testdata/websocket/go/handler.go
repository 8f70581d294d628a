// Package handler echoes WebSocket messages with each library runtimes/README.md names for
// the net/http form, one path per library, for the contract test: every one of them must
// be able to take the connection over from the wrapper's response writer.
package handler

import (
	"net/http"

	coder "github.com/coder/websocket"
	"github.com/gorilla/websocket"
	xnet "golang.org/x/net/websocket"
)

func Handle(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/coder":
		c, err := coder.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil || c.Write(r.Context(), typ, echo(msg)) != nil {
				return
			}
		}
	case "/gorilla":
		c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			typ, msg, err := c.ReadMessage()
			if err != nil || c.WriteMessage(typ, echo(msg)) != nil {
				return
			}
		}
	case "/xnet":
		xnet.Handler(func(c *xnet.Conn) {
			for {
				var msg []byte
				if xnet.Message.Receive(c, &msg) != nil || xnet.Message.Send(c, string(echo(msg))) != nil {
					return
				}
			}
		}).ServeHTTP(w, r)
	default:
		http.NotFound(w, r)
	}
}

func echo(msg []byte) []byte { return append([]byte("echo: "), msg...) }
