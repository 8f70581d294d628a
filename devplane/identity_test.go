package devplane_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testkit"
)

// who answers who the platform says called it and whether its key is still in its
// environment, and prints its key as the process started with it.
const who = `import os
def handle(event, request):
    start = dict(v.split("=", 1) for v in open("/proc/self/environ").read().split("\0") if "=" in v)
    print("my key:", start.get("SLESS_IDENTITY_KEY"), flush=True)
    return {"subject": request["headers"].get("x-sless-subject"), "key_in_env": "SLESS_IDENTITY_KEY" in os.environ}
`

// TestForgedIdentityIsRefused: in sless dev too, a function's process serves only calls
// signed with its key (derived from the data directory's identity.key): through the gateway
// a require_auth function learns its verified caller; a call that reaches its socket around
// the gateway, with a forged X-Sless-Subject or with no claim at all, is refused before the
// handler runs. The key is in no state file or log of sless dev, nor in the function's
// environment once its wrapper started.
func TestForgedIdentityIsRefused(t *testing.T) {
	d := startDev(t, devOptions{})
	d.deploy("who", "python3.11", map[string]string{"handler.py": who}, api.FunctionFields{MinReplicas: ptr.To[int32](1)})
	if _, err := d.client.CreateTrigger(context.Background(), d.ns, api.CreateTrigger{Name: "who-http", TriggerFields: api.TriggerFields{
		Type: ptr.To("http"), Function: ptr.To("who"), RequireAuth: ptr.To(true)}}); err != nil {
		t.Fatal(err)
	}
	url := d.endpoint + "/fn/" + d.ns + "/who"
	var got struct {
		Subject  string `json:"subject"`
		KeyInEnv bool   `json:"key_in_env"`
	}
	testkit.WaitFor(t, "the require_auth route", 10*time.Second, func() bool {
		resp, _ := testkit.PostJSON(t, url, `{}`, nil)
		return resp.StatusCode == http.StatusUnauthorized
	})
	resp, body := testkit.PostJSON(t, url, `{}`, http.Header{"Authorization": {"Bearer " + d.token}, "X-Sless-Subject": {"mallory"}})
	if err := json.Unmarshal(body, &got); resp.StatusCode != 200 || err != nil || got.Subject == "" || got.Subject == "mallory" || got.KeyInEnv {
		t.Fatalf("through the gateway: %d %s; want the verified subject and no key in the handler's environment", resp.StatusCode, body)
	}

	testkit.WaitFor(t, "the warm process", 10*time.Second, func() bool { return d.stats("who").Ready == 1 })
	sock := d.backend.Pool().Socket(d.stats("who").Addrs[0])
	for name, headers := range map[string]string{
		"a forged subject": "X-Sless-Subject: " + got.Subject + "\r\nX-Sless-Namespace: " + d.ns + "\r\n",
		"no claim at all":  "",
		"a forged signature": "X-Sless-Subject: " + got.Subject + "\r\nX-Sless-Signature: t=" + strconv.FormatInt(time.Now().Unix(), 10) +
			",v1=" + strings.Repeat("0", 64) + "\r\n",
	} {
		status, answer := rawCall(t, sock, "POST / HTTP/1.1\r\nHost: who\r\n"+headers+"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
		if status != http.StatusUnauthorized || !strings.Contains(answer, `"error"`) || strings.Contains(answer, "subject") {
			t.Errorf("%s on the process's socket: %d %s, want 401 and no handler run", name, status, answer)
		}
	}

	key := hex.EncodeToString(rules.FunctionKey(d.backend.IdentityMaster(), d.ns, "who"))
	if fi, err := os.Stat(filepath.Join(d.dataDir, "identity.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("identity.key: %v %v, want a file of mode 0600", fi, err)
	}
	// The key it prints is masked in its log, as its secrets' values are.
	testkit.WaitFor(t, "the function's line in its log", 10*time.Second, func() bool {
		var printed string
		_ = d.client.FunctionLogs(context.Background(), d.ns, "who", client.LogOptions{}, func(l api.LogLine) error {
			if strings.Contains(l.Line, "my key:") {
				printed = l.Line
			}
			return nil
		})
		if strings.Contains(printed, key) || printed != "" && !strings.Contains(printed, "my key: "+rules.SecretMask) {
			t.Fatalf("the function's log shows %q, want its key masked", printed)
		}
		return printed != ""
	})
	_ = filepath.WalkDir(d.dataDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || e.Name() == "identity.key" {
			return nil
		}
		if b, _ := os.ReadFile(path); strings.Contains(string(b), key) {
			t.Errorf("%s holds the function's key", path)
		}
		return nil
	})
}

// rawCall sends request as written to the Unix socket sock and reads the answer.
func rawCall(t *testing.T, sock, request string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
