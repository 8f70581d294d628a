package devplane

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/rules"
	triggerkinds "sless.dev/sless/triggers"
)

// Secrets live outside the state directory, one file each, their values sealed with
// AES-256-GCM under a key generated into the data directory on first use:
//
//	secrets.key                       32 random bytes (0600)
//	identity.key                      32 random bytes (0600): the master key calls to
//	                                  functions are signed with (rules.FunctionKey)
//	secrets/<ns>/<name>.json          keys, version, times and the sealed data (0600)
//
// So the state files, and a copy or backup of them, hold no value; a copy of the whole
// data directory does hold the key. The values are decrypted into memory when sless dev
// starts and reach a function only through its environment and its sandbox's tmpfs.

// secretFile is a secret's file: its API view and its sealed data (nonce + ciphertext, the
// namespace, name and version bound as associated data).
type secretFile struct {
	api.Secret
	Sealed []byte `json:"sealed"`
}

// secretEntry is a secret in memory.
type secretEntry struct {
	view api.Secret
	data map[string][]byte
}

// secretStore holds the secrets of a data directory.
type secretStore struct {
	dir  string
	aead cipher.AEAD
	mu   sync.Mutex // orders writers; readers take a copy under it
	m    map[string]*secretEntry
}

// openSecrets loads every secret of dataDir, creating its key on first use.
func openSecrets(dataDir string) (*secretStore, error) {
	key, err := dataKey(filepath.Join(dataDir, "secrets.key"), "the secrets key", "remove it and the secrets directory to start with no secrets")
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	s := &secretStore{dir: filepath.Join(dataDir, "secrets"), aead: aead, m: map[string]*secretEntry{}}
	err = filepath.WalkDir(s.dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return filepath.SkipAll
		}
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") {
			return err
		}
		e, err := s.read(path)
		if err != nil {
			return err
		}
		s.m[objectKey(e.view.Namespace, e.view.Name)] = e
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading the secrets in %s: %w", s.dir, err)
	}
	return s, nil
}

// dataKey reads one of the data directory's 32-byte keys (what names it; fresh says how
// to start over without it), generating it when there is none.
func dataKey(path, what, fresh string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("creating %s %s: %w", what, path, err)
		}
		_, err = f.Write(key)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
			return nil, fmt.Errorf("writing %s %s: %w", what, path, err)
		}
		return key, syncDir(filepath.Dir(path))
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", what, path, err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("%s %s is %d bytes, not 32: restore it from a backup of the data directory, or %s", what, path, len(key), fresh)
	}
	return key, nil
}

func additional(v api.Secret) []byte {
	return fmt.Appendf(nil, "%s/%s/%d", v.Namespace, v.Name, v.Version)
}

func (s *secretStore) read(path string) (*secretEntry, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f secretFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	n := s.aead.NonceSize()
	if len(f.Sealed) < n {
		return nil, fmt.Errorf("%s: the sealed data is cut short", path)
	}
	plain, err := s.aead.Open(nil, f.Sealed[:n], f.Sealed[n:], additional(f.Secret))
	if err != nil {
		return nil, fmt.Errorf("%s: cannot open it with secrets.key (a key of another data directory?): %w", path, err)
	}
	var data map[string][]byte
	if err := json.Unmarshal(plain, &data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &secretEntry{view: f.Secret, data: data}, nil
}

func (s *secretStore) path(key string) string {
	ns, name, _ := strings.Cut(key, "/")
	return filepath.Join(s.dir, ns, name+".json")
}

// write seals e and replaces its file durably.
func (s *secretStore) write(key string, e *secretEntry) error {
	plain, err := json.Marshal(e.data)
	if err != nil {
		return err
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	raw, err := json.Marshal(secretFile{Secret: e.view, Sealed: s.aead.Seal(nonce, nonce, plain, additional(e.view))})
	if err != nil {
		return err
	}
	return writeAtomic(s.path(key), raw)
}

// get answers a copy of the secret named key, if there is one.
func (s *secretStore) get(key string) (secretEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if !ok {
		return secretEntry{}, false
	}
	return *e, true
}

// secretObjects is the backend.Store of secrets.
type secretObjects struct{ b *Backend }

func (b *Backend) Secrets() backend.Store[api.Secret, api.SecretSpec] { return secretObjects{b} }

func (o secretObjects) List(_ context.Context, ns string) ([]api.Secret, error) {
	s := o.b.secrets
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []api.Secret{}
	for _, e := range s.m {
		if e.view.Namespace == ns {
			out = append(out, e.view)
		}
	}
	slices.SortFunc(out, func(x, y api.Secret) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

func (o secretObjects) Get(_ context.Context, ns, name string) (api.Secret, error) {
	e, ok := o.b.secrets.get(objectKey(ns, name))
	if !ok {
		return api.Secret{}, notFound("secret", ns, name)
	}
	return e.view, nil
}

func (o secretObjects) Create(_ context.Context, ns, name string, spec api.SecretSpec) (api.Secret, error) {
	s, key := o.b.secrets, objectKey(ns, name)
	s.mu.Lock()
	if _, ok := s.m[key]; ok {
		s.mu.Unlock()
		return api.Secret{}, exists("secret", ns, name)
	}
	if n := countIn(s.m, ns); n >= o.b.opts.MaxPerNamespace {
		s.mu.Unlock()
		return api.Secret{}, &backend.QuotaError{Kind: "secret", Namespace: ns, Limit: o.b.opts.MaxPerNamespace}
	}
	now := time.Now().UTC()
	e := &secretEntry{view: api.Secret{Name: name, Namespace: ns, CreatedAt: now, UpdatedAt: now, Version: 1, Keys: keysOf(spec.Data)}, data: spec.Data}
	return o.store(ns, name, key, e)
}

// store writes e under key (s.mu held, released here) and restarts the secret's users.
func (o secretObjects) store(ns, name, key string, e *secretEntry) (api.Secret, error) {
	s := o.b.secrets
	err := s.write(key, e)
	if err == nil {
		s.m[key] = e
	}
	s.mu.Unlock()
	if err != nil {
		return api.Secret{}, err
	}
	o.b.kickSecretUsers(ns, name)
	return e.view, nil
}

// Update replaces the data (mutate starts from none): a new version.
func (o secretObjects) Update(_ context.Context, ns, name string, mutate func(*api.SecretSpec) error) (api.Secret, error) {
	s, key := o.b.secrets, objectKey(ns, name)
	s.mu.Lock()
	old, ok := s.m[key]
	if !ok {
		s.mu.Unlock()
		return api.Secret{}, notFound("secret", ns, name)
	}
	var spec api.SecretSpec
	if err := mutate(&spec); err != nil {
		s.mu.Unlock()
		return api.Secret{}, err
	}
	view := old.view
	view.UpdatedAt, view.Version, view.Keys = time.Now().UTC(), old.view.Version+1, keysOf(spec.Data)
	e := &secretEntry{view: view, data: spec.Data}
	return o.store(ns, name, key, e)
}

func (o secretObjects) Delete(_ context.Context, ns, name string) error {
	s, key := o.b.secrets, objectKey(ns, name)
	s.mu.Lock()
	if _, ok := s.m[key]; !ok {
		s.mu.Unlock()
		return notFound("secret", ns, name)
	}
	err := removeDurably(s.path(key))
	if err == nil {
		delete(s.m, key)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	o.b.kickSecretUsers(ns, name)
	return nil
}

func keysOf(data map[string][]byte) []string { return slices.Sorted(maps.Keys(data)) }

// kickSecretUsers reconciles what references secret name of ns: its functions (new values,
// or a missing one) and its triggers (an event trigger's broker URL).
func (b *Backend) kickSecretUsers(ns, name string) {
	snap := b.store.snapshot()
	for key, r := range snap.functions {
		if r.Namespace == ns && slices.Contains(r.Spec.SecretNames(), name) {
			b.kickFunction(key)
		}
	}
	for key, r := range snap.triggers {
		if r.Namespace == ns && triggerkinds.Uses(r.Spec, name) {
			b.kickTrigger(key)
		}
	}
}

// missingSecretError names a secret or key a function references that does not exist.
type missingSecretError struct{ msg string }

func (e *missingSecretError) Error() string { return e.msg }

// secretValue is the value of key in secret name of namespace ns.
func (b *Backend) secretValue(ns, name, key string) ([]byte, error) {
	e, ok := b.secrets.get(objectKey(ns, name))
	if !ok {
		return nil, &missingSecretError{fmt.Sprintf("secret %q does not exist in namespace %s: create it (sless secret create %s --from-literal KEY=value) or remove the reference", name, ns, name)}
	}
	v, ok := e.data[key]
	if !ok {
		return nil, &missingSecretError{fmt.Sprintf("secret %q has no key %q (it has %s): add the key or change the reference", name, key, strings.Join(e.view.Keys, ", "))}
	}
	return v, nil
}

// secretInputs resolves a function's references: the variables of secret_env and, per
// secret_files directory, the files of the secret.
func (b *Backend) secretInputs(ns string, spec api.FunctionSpec) (env map[string]string, files map[string]map[string][]byte, err error) {
	for _, ref := range spec.SecretEnv {
		v, err := b.secretValue(ns, ref.Secret, ref.Key)
		if err != nil {
			return nil, nil, err
		}
		if env == nil {
			env = map[string]string{}
		}
		env[ref.Name] = string(v)
	}
	for _, ref := range spec.SecretFiles {
		e, ok := b.secrets.get(objectKey(ns, ref.Secret))
		if !ok {
			_, err := b.secretValue(ns, ref.Secret, "")
			return nil, nil, err
		}
		if files == nil {
			files = map[string]map[string][]byte{}
		}
		files[rules.SecretFilePath(ref.Secret, ref.Path)] = e.data
	}
	return env, files, nil
}
