package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/rules"
	"sless.dev/sless/triggers"
)

// secretResource is the secrets API: values go in (create, PUT) and never come out; an
// update replaces the whole data, which is a rotation (a new version).
var secretResource = resource[api.Secret, api.SecretSpec, api.CreateSecret, api.SecretFields]{
	store: backend.Backend.Secrets,
	wrap:  func(ss []api.Secret) any { return api.SecretList{Secrets: nonNil(ss)} },
	name:  func(req api.CreateSecret) string { return req.Name },
	base: func(req api.CreateSecret) (api.SecretSpec, api.SecretFields, error) {
		return api.SecretSpec{}, req.SecretFields, nil
	},
	apply: func(_, _ string, spec *api.SecretSpec, f api.SecretFields) error {
		data, err := secretData(f)
		if err != nil {
			return err
		}
		spec.Data = data
		return nil
	},
	inUse: secretInUse,
}

// secretData is a secret's new data (rules.SecretData): 400 naming the field, 413 past the
// size cap.
func secretData(f api.SecretFields) (map[string][]byte, error) {
	data, err := rules.SecretData(f.Data, f.DataBase64)
	switch {
	case err == nil:
		return data, nil
	case err.TooLarge:
		return nil, &httpError{Code: http.StatusRequestEntityTooLarge, Field: err.Field, Msg: err.Reason}
	}
	return nil, invalid(err.Field, "%s", err.Reason)
}

// secretInUse refuses to delete a secret that a function or a trigger of namespace ns
// references, naming them: a deleted secret would turn them not Ready.
func secretInUse(ctx context.Context, b backend.Backend, ns, name string) error {
	fns, err := b.Functions().List(ctx, ns)
	if err != nil {
		return err
	}
	trs, err := b.Triggers().List(ctx, ns)
	if err != nil {
		return err
	}
	var users []string
	for _, fn := range fns {
		if slices.Contains(fn.SecretNames(), name) {
			users = append(users, "function "+fn.Name)
		}
	}
	for _, t := range trs {
		if triggers.Uses(t.TriggerSpec, name) {
			users = append(users, "trigger "+t.Name)
		}
	}
	if len(users) == 0 {
		return nil
	}
	return &backend.ConflictError{Kind: "secret", Namespace: ns, Name: name,
		Reason: "in use by " + strings.Join(users, ", ") + "; remove the references first (" + strings.Join(append([]string{"secret_env", "secret_files"}, triggers.SecretFields()...), ", ") + ")"}
}

// validSecretRefs checks a function's secret_env and secret_files: variable names allowed
// and not set twice (nor also in env_vars), secret names and keys valid, mount directories
// allowed and apart.
func validSecretRefs(s api.FunctionSpec) error {
	if len(s.SecretEnv) > rules.MaxSecretRefs {
		return invalid("secret_env", "%d entries; at most %d are allowed", len(s.SecretEnv), rules.MaxSecretRefs)
	}
	if len(s.SecretFiles) > rules.MaxSecretRefs {
		return invalid("secret_files", "%d entries; at most %d are allowed", len(s.SecretFiles), rules.MaxSecretRefs)
	}
	seen := map[string]bool{}
	for i, e := range s.SecretEnv {
		at := fmt.Sprintf("secret_env[%d]", i)
		if err := rules.CheckEnvName(e.Name); err != nil {
			return invalid(at+".name", "%v", err)
		}
		if _, ok := s.EnvVars[e.Name]; ok || seen[e.Name] {
			return invalid(at+".name", "variable %q is set twice (in env_vars or secret_env); set it once", e.Name)
		}
		seen[e.Name] = true
		if err := validName(at+".secret", e.Secret); err != nil {
			return err
		}
		if err := rules.CheckSecretKey(e.Key); err != nil {
			return invalid(at+".key", "%v", err)
		}
	}
	var dirs []string
	for i, f := range s.SecretFiles {
		at := fmt.Sprintf("secret_files[%d]", i)
		if err := validName(at+".secret", f.Secret); err != nil {
			return err
		}
		dir := rules.SecretFilePath(f.Secret, f.Path)
		if err := rules.CheckSecretDir(dir); err != nil {
			return invalid(at+".path", "%v", err)
		}
		for _, d := range dirs {
			if rules.SecretDirsOverlap(d, dir) {
				return invalid(at+".path", "%s overlaps %s of another entry; give each secret a directory of its own", dir, d)
			}
		}
		dirs = append(dirs, dir)
	}
	return nil
}
