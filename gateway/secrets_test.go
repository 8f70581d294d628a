package gateway_test

import (
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testkit"
)

// TestSecretsNeverEchoed: the secrets API takes values (text and base64) and answers names,
// keys and versions only — on create, get, list and rotation.
func TestSecretsNeverEchoed(t *testing.T) {
	m := newMemServer(t)
	const sub = "secrets-tester"
	tok, ns := testkit.Token(t, memKey, sub), api.TenantNamespace(sub)
	const marker, binMarker = "marker-8b1f0c-plain", "marker-77ad-binary"
	raw := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, m.URL+"/v1/namespaces/"+ns+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	b64 := base64.StdEncoding.EncodeToString([]byte(binMarker))
	var answers []string
	check := func(what string, wantCode int, code int, body string) {
		t.Helper()
		if code != wantCode {
			t.Fatalf("%s: %d %s, want %d", what, code, body, wantCode)
		}
		answers = append(answers, body)
	}
	code, body := raw("POST", "/secrets", `{"name":"db","data":{"password":"`+marker+`"},"data_base64":{"cert.der":"`+b64+`"}}`)
	check("create", http.StatusCreated, code, body)
	if !strings.Contains(body, `"keys":["cert.der","password"]`) || !strings.Contains(body, `"version":1`) {
		t.Errorf("create answered %s: want the keys and version 1", body)
	}
	code, body = raw("GET", "/secrets/db", "")
	check("get", http.StatusOK, code, body)
	code, body = raw("GET", "/secrets", "")
	check("list", http.StatusOK, code, body)
	code, body = raw("PUT", "/secrets/db", `{"data":{"password":"`+marker+`-2"}}`)
	check("rotate", http.StatusOK, code, body)
	if !strings.Contains(body, `"keys":["password"]`) || !strings.Contains(body, `"version":2`) {
		t.Errorf("rotation answered %s: want the new keys and version 2", body)
	}
	for _, a := range answers {
		if strings.Contains(a, "marker-") || strings.Contains(a, b64) {
			t.Errorf("an answer echoes a value: %s", a)
		}
	}
}

// TestSecretValidation: bad names, keys, encodings and sizes are refused with the field to
// fix (413 past the size cap); a referenced secret cannot be deleted; references are checked.
func TestSecretValidation(t *testing.T) {
	m := newMemServer(t)
	const sub = "secret-validation"
	tok, ns := testkit.Token(t, memKey, sub), api.TenantNamespace(sub)
	do := func(method, path, body string) (int, api.Error) {
		t.Helper()
		code, e, _ := m.do(tok, ns, method, path, body)
		return code, e
	}
	if code, e := do("POST", "/secrets", `{"name":"db","data":{"password":"p","user":"u"}}`); code != http.StatusCreated {
		t.Fatalf("create db: %d %+v", code, e)
	}
	if code, e := do("POST", "/functions", `{"name":"f","runtime":"go1.23","secret_env":[{"name":"DB_PASSWORD","secret":"db","key":"password"}]}`); code != http.StatusCreated {
		t.Fatalf("create f: %d %+v", code, e)
	}
	if code, e := do("POST", "/triggers", `{"name":"orders","type":"event","function":"f","queue":"`+ns+`.orders","broker_secret":"amqp"}`); code != http.StatusCreated {
		t.Fatalf("create trigger: %d %+v", code, e)
	}
	if code, e := do("POST", "/secrets", `{"name":"amqp","data":{"host":"amqp://x"}}`); code != http.StatusCreated {
		t.Fatalf("create amqp: %d %+v", code, e)
	}
	big := strings.Repeat("v", rules.MaxSecretBytes)
	cases := []struct {
		name, method, path, body string
		code                     int
		field, says              string
	}{
		{"bad secret name", "POST", "/secrets", `{"name":"Db","data":{"a":"b"}}`, 400, "name", "not a valid name"},
		{"no data", "POST", "/secrets", `{"name":"e"}`, 400, "data", "at least one key"},
		{"bad key", "POST", "/secrets", `{"name":"e","data":{"a/b":"x"}}`, 400, "data.a/b", "not a valid key"},
		{"dot key", "POST", "/secrets", `{"name":"e","data":{"..":"x"}}`, 400, "data...", "not a valid key"},
		{"bad base64", "POST", "/secrets", `{"name":"e","data_base64":{"k":"%%%"}}`, 400, "data_base64.k", "base64"},
		{"key in both", "POST", "/secrets", `{"name":"e","data":{"k":"x"},"data_base64":{"k":"eA=="}}`, 400, "data_base64.k", "also in data"},
		{"too large", "POST", "/secrets", `{"name":"e","data":{"k":"` + big + `"}}`, 413, "data", "at most"},
		{"rotate too large", "PUT", "/secrets/db", `{"data":{"k":"` + big + `"}}`, 413, "data", "at most"},
		{"rotate missing", "PUT", "/secrets/nope", `{"data":{"k":"v"}}`, 404, "", "not found"},
		{"duplicate create", "POST", "/secrets", `{"name":"db","data":{"k":"v"}}`, 409, "", "already exists"},
		{"delete referenced by a function", "DELETE", "/secrets/db", ``, 409, "", "function f"},
		{"delete referenced by a trigger", "DELETE", "/secrets/amqp", ``, 409, "", "trigger orders"},
		{"reserved variable", "PUT", "/functions/f", `{"secret_env":[{"name":"LD_PRELOAD","secret":"db","key":"password"}]}`, 400, "secret_env[0].name", "reserved"},
		{"reserved prefix", "PUT", "/functions/f", `{"secret_env":[{"name":"SLESS_X","secret":"db","key":"password"}]}`, 400, "secret_env[0].name", "reserved"},
		{"reserved env_vars", "PUT", "/functions/f", `{"env_vars":{"NODE_OPTIONS":"--require x"}}`, 400, "env_vars.NODE_OPTIONS", "reserved"},
		{"variable twice", "PUT", "/functions/f", `{"env_vars":{"DB_PASSWORD":"x"}}`, 400, "secret_env[0].name", "set twice"},
		{"bad secret reference", "PUT", "/functions/f", `{"secret_env":[{"name":"A","secret":"No","key":"password"}]}`, 400, "secret_env[0].secret", "not a valid name"},
		{"bad key reference", "PUT", "/functions/f", `{"secret_env":[{"name":"A","secret":"db","key":""}]}`, 400, "secret_env[0].key", "not a valid key"},
		{"relative path", "PUT", "/functions/f", `{"secret_files":[{"secret":"db","path":"secrets/db"}]}`, 400, "secret_files[0].path", "absolute"},
		{"path over the code", "PUT", "/functions/f", `{"secret_files":[{"secret":"db","path":"/app/conf"}]}`, 400, "secret_files[0].path", "/app"},
		{"unclean path", "PUT", "/functions/f", `{"secret_files":[{"secret":"db","path":"/var/s/../x"}]}`, 400, "secret_files[0].path", "clean"},
		{"overlapping paths", "PUT", "/functions/f", `{"secret_files":[{"secret":"db","path":"/var/s"},{"secret":"amqp","path":"/var/s/amqp"}]}`, 400, "secret_files[1].path", "overlaps"},
		{"default paths overlap", "PUT", "/functions/f", `{"secret_files":[{"secret":"db"},{"secret":"amqp","path":"/var/sless/secrets/db/x"}]}`, 400, "secret_files[1].path", "overlaps"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, e := do(c.method, c.path, c.body)
			if code != c.code || e.Field != c.field || !strings.Contains(e.Error, c.says) {
				t.Errorf("%d field=%q %q, want %d field=%q saying %q", code, e.Field, e.Error, c.code, c.field, c.says)
			}
		})
	}
	// Once nothing references it, it goes.
	if code, e := do("PUT", "/functions/f", `{"secret_env":[]}`); code != http.StatusOK {
		t.Fatalf("clear references: %d %+v", code, e)
	}
	if code, e := do("DELETE", "/secrets/db", ``); code != http.StatusNoContent {
		t.Fatalf("delete unreferenced: %d %+v", code, e)
	}
	// Another tenant reaches none of it.
	other := testkit.Token(t, memKey, "someone-else")
	if code, _, _ := m.do(other, ns, "GET", "/secrets", ""); code != http.StatusForbidden {
		t.Errorf("another tenant listing the secrets: %d, want 403", code)
	}
}
