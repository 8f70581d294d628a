package cli

import (
	"bytes"
	"encoding/base64"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testkit"
)

// secretMarker is a value no output or error may show.
const secretMarker = "marker-5f1e0b-value"

func TestParseSecretEnv(t *testing.T) {
	checkParses(t, "parseSecretEnv", parseSecretEnv, []parseCase[[]api.SecretEnv]{
		{in: nil, want: nil},
		{in: []string{"DB_PASSWORD=db/password"}, want: []api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}}},
		{in: []string{"A=s/k.1", "B=s/k", "A=t/x"}, want: []api.SecretEnv{{Name: "A", Secret: "t", Key: "x"}, {Name: "B", Secret: "s", Key: "k"}}},
		{in: []string{"DB_PASSWORD"}, code: ExitUsage},
		{in: []string{"DB_PASSWORD=db"}, code: ExitUsage},
		{in: []string{"=db/password"}, code: ExitUsage},
		{in: []string{"A=/password"}, code: ExitUsage},
		{in: []string{"A=db/"}, code: ExitUsage},
		{in: []string{"A=db/a/b"}, code: ExitUsage},  // a key holds no '/'
		{in: []string{"A=Db/key"}, code: ExitUsage},  // not a name
		{in: []string{"1A=db/key"}, code: ExitUsage}, // not a variable
		{in: []string{"PATH=db/key"}, code: ExitUsage},
		{in: []string{"SLESS_X=db/key"}, code: ExitUsage},
	})
}

func TestParseSecretFiles(t *testing.T) {
	checkParses(t, "parseSecretFiles", parseSecretFiles, []parseCase[[]api.SecretFile]{
		{in: nil, want: nil},
		{in: []string{"db"}, want: []api.SecretFile{{Secret: "db"}}},
		{in: []string{"db:/srv/db", "tls", "db"}, want: []api.SecretFile{{Secret: "db"}, {Secret: "tls"}}},
		{in: []string{""}, code: ExitUsage},
		{in: []string{"db:"}, code: ExitUsage},
		{in: []string{":/srv/db"}, code: ExitUsage},
		{in: []string{"db:srv/db"}, code: ExitUsage},
		{in: []string{"db:/etc/db"}, code: ExitUsage},
		{in: []string{"db:/srv/../etc"}, code: ExitUsage},
		{in: []string{"DB"}, code: ExitUsage},
	})
}

// TestReadSecretData: literals and files become data (text) or data_base64 (anything not
// UTF-8); a malformed flag is a usage error naming the flag and never quoting a value.
func TestReadSecretData(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	text := write("password.txt", []byte(secretMarker+"\n"))
	bin := []byte("\xff\xfe\x00" + secretMarker)
	binary := write("cert.der", bin)
	big := write("big", bytes.Repeat([]byte("x"), rules.MaxSecretBytes+1))
	for _, tc := range []struct {
		name            string
		literals, files []string
		stdin           string
		want            api.SecretFields
		code            int
		errWant         string
	}{
		{name: "literals", literals: []string{"user=app", "dsn=a=b", "empty="},
			want: api.SecretFields{Data: map[string]string{"user": "app", "dsn": "a=b", "empty": ""}}},
		{name: "files", files: []string{"password=" + text, binary},
			want: api.SecretFields{Data: map[string]string{"password": secretMarker + "\n"},
				DataBase64: map[string]string{"cert.der": base64.StdEncoding.EncodeToString(bin)}}},
		{name: "stdin", literals: []string{"user=app"}, files: []string{"password=-"}, stdin: secretMarker,
			want: api.SecretFields{Data: map[string]string{"user": "app", "password": secretMarker}}},
		{name: "no data", code: ExitUsage, errWant: "--from-literal KEY=value or --from-file KEY=PATH"},
		{name: "no =", literals: []string{"user=app", secretMarker}, code: ExitUsage, errWant: "--from-literal (the 2nd one): want KEY=value"},
		{name: "empty key", literals: []string{"=" + secretMarker}, code: ExitUsage, errWant: "--from-literal (the 1st one)"},
		{name: "bad key", literals: []string{"a/b=" + secretMarker}, code: ExitUsage, errWant: "--from-literal a/b"},
		{name: "twice", literals: []string{"password=" + secretMarker}, files: []string{"password=" + text}, code: ExitUsage,
			errWant: "--from-file password: key \"password\" is also given by --from-literal password"},
		{name: "missing file", files: []string{"k=" + filepath.Join(dir, "nope")}, code: ExitUsage, errWant: "--from-file k"},
		{name: "file empty key", files: []string{"=" + text}, code: ExitUsage, errWant: "--from-file"},
		{name: "file empty path", files: []string{"k="}, code: ExitUsage, errWant: "--from-file"},
		{name: "stdin without key", files: []string{"-"}, code: ExitUsage, errWant: "--from-file -"},
		{name: "stdin twice", files: []string{"a=-", "b=-"}, stdin: secretMarker, code: ExitUsage, errWant: "stdin is read once"},
		{name: "too big", files: []string{"k=" + big}, code: ExitUsage, errWant: "the most a secret holds"},
		{name: "too big in all", literals: []string{"a=" + strings.Repeat("y", rules.MaxSecretBytes/2)}, files: []string{"b=" + write("half", bytes.Repeat([]byte("z"), rules.MaxSecretBytes/2))},
			code: ExitUsage, errWant: "the most a secret holds"},
	} {
		got, err := readSecretData(tc.literals, tc.files, strings.NewReader(tc.stdin))
		if code := exitCodeOf(err); code != tc.code {
			t.Errorf("%s: %+v, %v (exit %d); want exit %d", tc.name, got, err, code, tc.code)
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), tc.errWant) || strings.Contains(err.Error(), secretMarker) {
				t.Errorf("%s: error %q: want it to say %q and never the value", tc.name, err, tc.errWant)
			}
			continue
		}
		if !equalFields(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func equalFields(a, b api.SecretFields) bool {
	return maps.Equal(a.Data, b.Data) && maps.Equal(a.DataBase64, b.DataBase64)
}

// TestProjectSecretRefs: sless.yaml's secret_env and secret_files are checked like the
// flags, the flags merge over them, and a file without them leaves the function's own.
func TestProjectSecretRefs(t *testing.T) {
	dir := t.TempDir()
	load := func(yaml string) (project, error) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, projectFile), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return loadProject(dir)
	}
	p, err := load(`runtime: python
secret_env:
  - {name: DB_PASSWORD, secret: db, key: password}
  - {name: DB_USER, secret: db, key: user}
secret_files:
  - secret: tls
  - {secret: db, path: /srv/db}
`)
	if err != nil {
		t.Fatal(err)
	}
	fields := api.FunctionFields{
		SecretEnv:   &[]api.SecretEnv{{Name: "DB_USER", Secret: "db2", Key: "user"}, {Name: "TOKEN", Secret: "api", Key: "token"}},
		SecretFiles: &[]api.SecretFile{{Secret: "db"}},
	}
	p.addSecretRefs(&fields)
	wantEnv := []api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}, {Name: "DB_USER", Secret: "db2", Key: "user"}, {Name: "TOKEN", Secret: "api", Key: "token"}}
	wantFiles := []api.SecretFile{{Secret: "tls"}, {Secret: "db"}}
	if fields.SecretEnv == nil || !slices.Equal(*fields.SecretEnv, wantEnv) || fields.SecretFiles == nil || !slices.Equal(*fields.SecretFiles, wantFiles) {
		t.Errorf("merged: %+v %+v", fields.SecretEnv, fields.SecretFiles)
	}
	// Without flags the file's lists are sent as they are; a file without them sends none.
	fields = api.FunctionFields{}
	p.addSecretRefs(&fields)
	if fields.SecretEnv == nil || len(*fields.SecretEnv) != 2 || fields.SecretFiles == nil || len(*fields.SecretFiles) != 2 {
		t.Errorf("the file alone: %+v %+v", fields.SecretEnv, fields.SecretFiles)
	}
	p, err = load("runtime: python\nsecret_env: []\n")
	fields = api.FunctionFields{}
	if p.addSecretRefs(&fields); err != nil || fields.SecretEnv == nil || len(*fields.SecretEnv) != 0 || fields.SecretFiles != nil {
		t.Errorf("secret_env: [] must clear the list and leave the files: %v %+v %+v", err, fields.SecretEnv, fields.SecretFiles)
	}
	p, err = load(string(projectYAML("python3.12"))) // init's commented example
	fields = api.FunctionFields{}
	if p.addSecretRefs(&fields); err != nil || fields != (api.FunctionFields{}) {
		t.Errorf("sless init's sless.yaml: %v %+v", err, fields)
	}
	for _, bad := range []string{
		"secret_env:\n  - {name: DB_PASSWORD, secret: db}\n",
		"secret_env:\n  - {name: PATH, secret: db, key: k}\n",
		"secret_env:\n  - {name: A, secret: db, key: k, value: v}\n",
		"secret_files:\n  - {secret: db, path: etc}\n",
		"secret_files:\n  - {path: /srv/x}\n",
		"secret_env: {name: A}\n",
	} {
		if _, err := load(bad); exitCodeOf(err) != ExitUsage || !strings.Contains(err.Error(), projectFile) {
			t.Errorf("sless.yaml %q: %v, want a usage error naming it", bad, err)
		}
	}
}

// TestDeploySendsSecretRefs: deploy sends sless.yaml's references merged with the flags', on
// create and on update, and sends nothing when the function already has them.
func TestDeploySendsSecretRefs(t *testing.T) {
	fake := startFakeAPI(t)
	dir := filepath.Join(t.TempDir(), "h")
	if out, err := testkit.RunCommand(t, newInitCmd, dir, "--runtime", "python"); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, projectFile), []byte(`runtime: python
secret_env:
  - {name: DB_PASSWORD, secret: db, key: password}
secret_files:
  - {secret: tls}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := testkit.RunCommand(t, newDeployCmd, dir, "--wait=false", "--secret-env", "TOKEN=api/token")
	if err != nil || len(fake.created) != 1 {
		t.Fatalf("deploy: %v %+v\n%s", err, fake.created, out)
	}
	c := fake.created[0]
	wantEnv := []api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}, {Name: "TOKEN", Secret: "api", Key: "token"}}
	if c.SecretEnv == nil || !slices.Equal(*c.SecretEnv, wantEnv) || c.SecretFiles == nil || !slices.Equal(*c.SecretFiles, []api.SecretFile{{Secret: "tls"}}) {
		t.Errorf("created with %+v %+v", c.SecretEnv, c.SecretFiles)
	}

	// The function has them already (its default path filled in): no update.
	fake.existing = &api.Function{Name: "h", FunctionSpec: api.FunctionSpec{Runtime: "python3.11",
		SecretEnv: []api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}}, SecretFiles: []api.SecretFile{{Secret: "tls", Path: rules.SecretMountDir + "/tls"}}}}
	if out, err := testkit.RunCommand(t, newDeployCmd, dir, "--wait=false"); err != nil || len(fake.updated) != 0 {
		t.Fatalf("deploy of what the function has: %v, updated %+v\n%s", err, fake.updated, out)
	}
	// A flag that changes one: the merged list is sent, the unchanged one is not.
	if out, err := testkit.RunCommand(t, newDeployCmd, dir, "--wait=false", "--secret-env", "DB_PASSWORD=db/password2"); err != nil || len(fake.updated) != 1 {
		t.Fatalf("deploy with a changed reference: %v, updated %+v\n%s", err, fake.updated, out)
	}
	u := fake.updated[0]
	if u.SecretEnv == nil || !slices.Equal(*u.SecretEnv, []api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password2"}}) || u.SecretFiles != nil {
		t.Errorf("updated with %+v %+v", u.SecretEnv, u.SecretFiles)
	}
}

// TestSecretKind: secrets are a kind of the generic verbs, by any of their names, and the
// table shows keys and versions.
func TestSecretKind(t *testing.T) {
	for _, name := range []string{"secret", "secrets", "sec"} {
		if k, err := kindNamed(name); err != nil || k.names()[0] != "secret" {
			t.Errorf("kindNamed(%q) = %v, %v", name, k, err)
		}
	}
	if _, err := kindNamed("bogus"); exitCodeOf(err) != ExitUsage || !strings.Contains(err.Error(), "want functions, triggers, jobs or secrets") {
		t.Errorf("kindNamed(bogus): %v", err)
	}
	now := time.Now()
	tb := secretKind.table(
		api.Secret{Name: "db", Version: 3, Keys: []string{"password", "user"}, CreatedAt: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-time.Minute)},
		api.Secret{Name: "many", Version: 1, Keys: []string{"a", "b", "c", "d", "e", "f"}, CreatedAt: now, UpdatedAt: now})
	want := [][]string{{"db", "password,user", "3", "1m", "2h"}, {"many", "a,b,c,d,… (+2)", "1", "0s", "0s"}}
	if !slices.EqualFunc(tb.rows, want, slices.Equal[[]string]) {
		t.Errorf("rows %q, want %q", tb.rows, want)
	}
}
