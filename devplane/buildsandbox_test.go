package devplane_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"sless.dev/sless/devplane/pool"
	"sless.dev/sless/gateway/api"
)

// buildProbe is a Node function whose npm install runs a preinstall script as a tenant's
// would: it records what it is and what it can reach of the machine, tries to plant what
// could outlive the build (a set-user-ID copy of node, a link where the platform writes the
// build's manifest), and leaves the record in the build, which the function serves.
var buildProbe = map[string]string{
	"handler.js": `const fs = require('fs');
exports.handle = () => JSON.parse(fs.readFileSync(__dirname + '/probe.json', 'utf8'));
`,
	"package.json": `{"name": "probe", "version": "1.0.0",
  "scripts": {"preinstall": "node probe.js"},
  "dependencies": {"dep": "file:./dep"}}
`,
	"dep/package.json": `{"name": "dep", "version": "1.0.0"}
`,
	"probe.js": `const fs = require('fs'), net = require('net');
const out = {uid: process.getuid(), env: Object.keys(process.env), read: {}, list: {}};
for (const f of (process.env.PROBE_READ || '').split(',').concat(['/proc/1/environ'])) {
  try { out.read[f] = fs.readFileSync(f, 'utf8'); } catch (e) { out.read[f] = 'ERR ' + e.code; }
}
for (const d of (process.env.PROBE_LIST || '').split(',')) {
  try { out.list[d] = fs.readdirSync(d); } catch (e) { out.list[d] = 'ERR ' + e.code; }
}
try { fs.copyFileSync(process.execPath, 'suid-node'); fs.chmodSync('suid-node', 0o4755); out.suid = 'planted'; } catch (e) { out.suid = 'ERR ' + e.code; }
try { fs.symlinkSync(process.env.PROBE_VICTIM, '../.sless-artifact.json'); out.link = 'planted'; } catch (e) { out.link = 'ERR ' + e.code; }
const s = net.connect({host: '127.0.0.1', port: Number(process.env.PROBE_PORT)});
s.setTimeout(3000);
const done = (what) => { out.connect = what; fs.writeFileSync('probe.json', JSON.stringify(out)); s.destroy(); };
s.on('connect', () => done('connected'));
s.on('error', (e) => done('ERR ' + e.code));
s.on('timeout', () => done('timeout'));
`,
}

// TestBuildsRunSandboxed is issue 51's first attack, as a class: what a tenant uploads runs
// at build time (npm lifecycle scripts here; pip and the Go toolchain the same way) as a
// user of its own, in a jail that shows neither the data directory (signing key, secrets
// key, state) nor other tenants' builds nor sless dev's environment, on the functions'
// network, and nothing it leaves in the build is the platform's to trip over: no set-ID
// file, no link the platform writes through.
func TestBuildsRunSandboxed(t *testing.T) {
	t.Setenv("SLESS_PLATFORM_SECRET", "platform-env-must-not-reach-builds")
	builds := t.TempDir()
	victim := filepath.Join(t.TempDir(), "written-through-a-link")
	d := startDev(t, devOptions{buildDir: builds})
	if !d.backend.Pool().Isolation().Sandboxed {
		t.Skip("sandboxes need root")
	}
	if err := os.WriteFile(filepath.Join(d.dataDir, "dev-signing.key"), []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	loopback := banner(t, "127.0.0.1:0", "PLATFORM-SERVICE")
	other := d.as("other")
	other.deploy("plain", "python3.11", map[string]string{"handler.py": "def handle(event):\n    return 'hi'\n"}, api.FunctionFields{})

	files := map[string]string{}
	for k, v := range buildProbe {
		files[k] = v
	}
	port := loopback[strings.LastIndex(loopback, ":")+1:]
	env := map[string]string{
		"PROBE_READ":   strings.Join([]string{filepath.Join(d.dataDir, "dev-signing.key"), filepath.Join(d.dataDir, "secrets.key")}, ","),
		"PROBE_LIST":   strings.Join([]string{d.dataDir, filepath.Join(builds, other.ns), "/root"}, ","),
		"PROBE_VICTIM": victim,
		"PROBE_PORT":   port,
	}
	// The probe reads its settings from the build's own environment: baked into the source.
	files["probe.js"] = "Object.assign(process.env, " + mustJSON(t, env) + ");\n" + files["probe.js"]
	fn := d.deploy("probe", "nodejs20", files, api.FunctionFields{})
	if !fn.Status.Ready {
		t.Fatalf("the probe did not build: %+v", fn.Status)
	}
	code, body := d.invoke("probe", `{}`)
	if code != 200 {
		_, lines := d.logs("/functions/probe/logs", d.token)
		t.Fatalf("the probe: %d %s; its log: %+v", code, body, lines)
	}
	var got struct {
		UID                 int
		Env                 []string
		Read                map[string]string
		List                map[string]any
		Suid, Link, Connect string
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("the probe answered %s", body)
	}
	t.Logf("the build saw: %s", body)
	if got.UID < pool.FirstSandboxUID {
		t.Errorf("the build ran as uid %d, not a sandbox user", got.UID)
	}
	for _, k := range got.Env {
		if k == "SLESS_PLATFORM_SECRET" {
			t.Errorf("the build got sless dev's environment: %v", got.Env)
		}
	}
	for f, v := range got.Read {
		if !strings.HasPrefix(v, "ERR") {
			t.Errorf("the build read %s", f)
		}
	}
	for dir, v := range got.List {
		if s, ok := v.(string); !ok || !strings.HasPrefix(s, "ERR") {
			t.Errorf("the build listed %s: %v", dir, v)
		}
	}
	if got.Connect != "ERR ECONNREFUSED" && !strings.HasPrefix(got.Connect, "ERR") {
		t.Errorf("the build reached a service on this machine's loopback: %s", got.Connect)
	}
	if _, err := os.Lstat(victim); err == nil {
		t.Errorf("the platform wrote through a link the build left: %s exists", victim)
	}
	// What the build left belongs to the platform, set-ID bits stripped, written by none.
	err := filepath.Walk(filepath.Join(builds, d.ns), func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		if info.Mode()&os.ModeSymlink == 0 && (st.Uid != 0 || info.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || info.Mode().Perm()&0o022 != 0) {
			t.Errorf("%s: owner %d, mode %s", p, st.Uid, info.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBuildReadsNoPlatformFile is the exploit of issue 51 itself: a requirements.txt that
// includes a file of the data directory by a relative path fails without a byte of it in the
// function's status or build log.
func TestBuildReadsNoPlatformFile(t *testing.T) {
	builds := t.TempDir()
	d := startDev(t, devOptions{buildDir: builds})
	if !d.backend.Pool().Isolation().Sandboxed {
		t.Skip("sandboxes need root")
	}
	key := filepath.Join(d.dataDir, "dev-signing.key") // where sless dev keeps it
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(filepath.Join(builds, d.ns, "python3.11-x.building", "handler"), key)
	if err != nil {
		t.Fatal(err)
	}
	fn := d.deploy("reader", "python3.11", map[string]string{
		"handler.py":       "def handle(event):\n    return 'hi'\n",
		"requirements.txt": "--no-index\n-r " + rel + "\n",
	}, api.FunctionFields{})
	secret, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	_, lines := d.logs("/functions/reader/builds/latest/logs", d.token)
	var log strings.Builder
	for _, l := range lines {
		log.WriteString(l.Line + "\n")
	}
	k := strings.TrimSpace(string(secret))
	if strings.Contains(fn.Status.Message, k) || strings.Contains(log.String(), k) || fn.Status.Ready {
		t.Fatalf("the build read the signing key (ready %v): %s\n%s", fn.Status.Ready, fn.Status.Message, log.String())
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
