//go:build e2e

package e2e

import (
	"archive/tar"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"

	"sless.dev/sless/test/images"
)

// snoopProbe is a tenant's npm preinstall script: run by kaniko during the build, it looks for
// every credential a build pod could hand the step that runs it — variables of the artifact
// store, a Docker config where kaniko and the push step read one, a service-account token,
// another process's environment — tries an anonymous push over another tenant's repository,
// and writes what it found into the image.
const snoopProbe = `const fs = require('fs'), path = require('path'), http = require('http');
const found = [];
for (const k of Object.keys(process.env)) {
  if (/^(AWS_|S3_)|SECRET|PASSWORD|TOKEN|CREDENTIAL/i.test(k)) found.push('variable ' + k);
}
const look = (p) => {
  let st;
  try { st = fs.statSync(p); } catch { return; }
  if (st.isDirectory()) { for (const e of fs.readdirSync(p)) look(path.join(p, e)); return; }
  try { fs.readFileSync(p); found.push('file ' + p); } catch {}
};
for (const p of ['/kaniko/.docker', '/var/run/sless', '/var/run/secrets', '/run/secrets', '/root/.docker', process.env.DOCKER_CONFIG || '/nonexistent']) look(p);
for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
  try {
    if (/(^|\0)(AWS_|S3_)[^=]*=/.test(fs.readFileSync('/proc/' + pid + '/environ', 'latin1'))) found.push('process ' + pid + ' environment');
  } catch {}
}
const finish = (push) => {
  fs.writeFileSync('found.txt', found.length ? found.join('\n') : 'nothing found');
  fs.writeFileSync('probe.txt', 'uid ' + process.getuid() + '; anonymous push: ' + push);
};
const req = http.request({host: 'REGISTRY_HOST', port: REGISTRY_PORT, method: 'POST', path: '/v2/sless-victim/fn/blobs/uploads/', timeout: 10000},
  (res) => { res.resume(); finish(String(res.statusCode)); });
req.on('timeout', () => req.destroy(new Error('timeout')));
req.on('error', (e) => finish(e.code || e.message));
req.end();
`

// TestBuildStepsHoldNoCredential: a tenant's install step runs in the build's kaniko step
// (here an npm preinstall script, as root) and finds no credential of the platform's — none
// of the artifact store's variables, no Docker config, no service-account token, no other
// process's environment — and the registry refuses its anonymous push over another tenant's
// repository; what it found is in the image it built, which the function serves. The image
// runs by the digest its build pushed, in the tenant's own repository, and holds none of the
// platform's secret values. One Node build.
func TestBuildStepsHoldNoCredential(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	host, port, _ := strings.Cut(registry, ":")
	probe := strings.NewReplacer("REGISTRY_HOST", host, "REGISTRY_PORT", port).Replace(snoopProbe)
	createAndUpload(t, tn, "snoop", imageFields("nodejs20"), map[string]string{
		"package.json": `{"name": "snoop", "version": "1.0.0", "private": true, "scripts": {"preinstall": "node probe.js"}}`,
		".npmrc":       "audit=false\nfund=false\nupdate-notifier=false\n",
		"probe.js":     probe,
		"handler.js": "const fs = require('fs');\n" +
			"exports.handle = async () => ({found: fs.readFileSync(__dirname + '/found.txt', 'utf8'), probe: fs.readFileSync(__dirname + '/probe.txt', 'utf8')});\n",
	})
	fn := waitReady(t, tn, "snoop")

	ref, err := name.NewDigest(fn.Status.Image, name.Insecure)
	if err != nil || ref.Context().Name() != registry+"/"+tn.ns+"/snoop" {
		t.Errorf("status.image %q (%v): want the build's digest in %s/%s/snoop", fn.Status.Image, err, registry, tn.ns)
	}
	secrets := []string{s3Secret, registryPassword}
	var files int
	if err := walkImage(t, fn.Status.Image, func(path string, content string) {
		files++
		for _, s := range secrets {
			if strings.Contains(content, s) {
				t.Errorf("the image's /%s holds a secret of the platform's (%.6s…)", path, s)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Error("no file of the image's /app was read")
	}

	waitServiceResolvable(t, tn, "snoop")
	resp, body := invoke(t, tn, "snoop", `{}`)
	var got struct{ Found, Probe string }
	if err := json.Unmarshal([]byte(body), &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the function answered %d %q (%v)", resp.StatusCode, body, err)
	}
	t.Logf("the install step ran: %s", got.Probe)
	if got.Found != "nothing found" {
		t.Errorf("the tenant's install step found credentials of the platform's:\n%s", got.Found)
	}
	if !strings.Contains(got.Probe, "anonymous push: 401") {
		t.Errorf("the registry did not refuse the install step's anonymous push: %s", got.Probe)
	}
}

// walkImage calls fn with the path and content of every regular file under /app of the image
// ref.
func walkImage(t *testing.T, ref string, fn func(path, content string)) error {
	t.Helper()
	return images.Walk(pull(t, ref), func(path string, h *tar.Header, r io.Reader) error {
		if h.Typeflag != tar.TypeReg || !strings.HasPrefix(path, "app/") {
			return nil
		}
		b, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		fn(path, string(b))
		return nil
	})
}
