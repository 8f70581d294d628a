// Command bare is the baseline for the Go wrapper benchmark: a plain net/http server that
// answers the same JSON as the benchmark function, with nothing else.
package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
)

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var event map[string]interface{}
		_ = json.Unmarshal(body, &event)
		out, _ := json.Marshal(map[string]interface{}{"message": "hello, " + toString(event["name"])})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	})
	if err := http.ListenAndServe(net.JoinHostPort("127.0.0.1", os.Getenv("PORT")), nil); err != nil {
		panic(err)
	}
}

func toString(v interface{}) string {
	s, _ := v.(string)
	return s
}
