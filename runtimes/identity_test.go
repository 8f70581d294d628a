package runtimes_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/rules/rulestest"
)

// identityHarness runs a wrapper's verifier over identity.json in its own language and prints
// one "reason:status" (or "ok") per case; header values are handed over as that language's
// HTTP parser gives them (Latin-1 decoded bytes), and the key is loaded from an environment
// it must leave.
var identityHarness = map[buildkit.Language][]string{
	buildkit.LanguagePython: {"-c", `
import json, sys
sys.path.insert(0, sys.argv[1])
import sless_identity as i
d = json.load(open(sys.argv[2]))
out = []
for c in d["cases"]:
    env = {"SLESS_IDENTITY_KEY": d["keys"][c["key"]]} if c["key"] else {}
    key = i.load_key(env)
    assert "SLESS_IDENTITY_KEY" not in env, "the key stayed in the environment"
    r = i.refusal(key, c["method"], c["path"], [(n, v.encode().decode("iso-8859-1")) for n, v in c["headers"]], d["now"])
    out.append("ok" if r is None else "%s:%d" % (r[1], r[0]))
print(json.dumps(out))
`},
	buildkit.LanguageNode: {"-e", `
const i = require(process.argv[1] + '/sless_identity.js');
const d = JSON.parse(require('node:fs').readFileSync(process.argv[2], 'utf8'));
console.log(JSON.stringify(d.cases.map((c) => {
  const env = c.key ? { SLESS_IDENTITY_KEY: d.keys[c.key] } : {};
  const key = i.loadKey(env);
  if ('SLESS_IDENTITY_KEY' in env) throw new Error('the key stayed in the environment');
  const raw = c.headers.flatMap(([n, v]) => [n, Buffer.from(v, 'utf8').toString('latin1')]);
  const r = i.refusal(key, c.method, c.path, raw, d.now);
  return r === null ? 'ok' : r.reason + ':' + r.status;
})));
`},
}

// TestIdentityVectorsPythonNode runs rules/rulestest/identity.json through the Python and
// Node wrappers' verifiers (the Go wrapper's runs it in runtimes/go/server), in every
// version of each: all three refuse and pass the same calls for the same reasons.
func TestIdentityVectorsPythonNode(t *testing.T) {
	id := rulestest.IdentityTable(t)
	vectors, err := filepath.Abs(filepath.Join("..", "rules", "rulestest", "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range runtimeNames {
		rt := buildkit.Runtimes[name]
		harness, ok := identityHarness[rt.Language]
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			interp, err := buildkit.Interpreter(rt)
			if err != nil {
				if testing.Short() {
					t.Skipf("needs runtime %s on this machine: %v", name, err)
				}
				t.Fatalf("runtime %s: %v (test/tools/deps.sh installs it)", name, err)
			}
			dir, _ := filepath.Abs(string(rt.Language))
			out, err := exec.Command(interp, append(harness, dir, vectors)...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", name, err, out)
			}
			var got []string
			if err := json.Unmarshal(out, &got); err != nil || len(got) != len(id.Cases) {
				t.Fatalf("harness answered %s (%v)", out, err)
			}
			for i, c := range id.Cases {
				want := c.Want
				switch want {
				case "ok":
				case "badkey":
					want += ":" + strconv.Itoa(500)
				default:
					want += ":" + strconv.Itoa(401)
				}
				if got[i] != want {
					t.Errorf("%s: verifier says %s, want %s", c.Name, got[i], want)
				}
			}
		})
	}
}
