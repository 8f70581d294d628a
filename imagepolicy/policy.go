// Package imagepolicy decides which prebuilt images a tenant's functions may run, and
// reaches their registries for tag resolution without a tenant's reference steering the
// operator anywhere else. The operator (reconcilers) enforces it; the renderers (scaling)
// use OwnImage to attach the platform's pull secret only to a tenant's own images.
package imagepolicy

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// FlagAllowedRegistries is the operator flag that sets Policy's allowed registries; messages
// name it so a refused tenant knows what the platform's operator would change.
const FlagAllowedRegistries = "--allowed-registries"

// location is a registry host[:port] and a repository path prefix in it ("" for all of it).
type location struct{ host, path string }

func (l location) String() string {
	if l.path == "" {
		return l.host
	}
	return l.host + "/" + l.path
}

// holds reports whether repository path (no host) of registry host is under l.
func (l location) holds(host, path string) bool {
	return host == l.host && (l.path == "" || path == l.path || strings.HasPrefix(path, l.path+"/"))
}

// parseLocation reads host[:port][/path], normalized as go-containerregistry names
// registries (docker.io is index.docker.io) so it compares with parsed references.
func parseLocation(s string) (location, error) {
	host, path, _ := strings.Cut(strings.TrimSuffix(strings.TrimSpace(s), "/"), "/")
	repo := path
	if repo == "" {
		repo = "x"
	}
	// Parsed as a repository in it: a host go-containerregistry would not read as a
	// registry (no dot, port or localhost) reads as a Docker Hub path and is refused.
	r, err := name.NewRepository(host + "/" + repo)
	if err != nil || host == "" || strings.HasSuffix(host, ":") || strings.Contains("/"+path, "//") || r.RepositoryStr() != repo && r.RepositoryStr() != "library/"+repo {
		return location{}, fmt.Errorf("registry %q: want host[:port][/path]", s)
	}
	if reg := r.RegistryStr(); reg != host && !(host == "docker.io" && reg == name.DefaultRegistry) {
		return location{}, fmt.Errorf("registry %q: %q is not a registry host (want a name with a dot or a port)", s, host)
	}
	return location{host: strings.ToLower(r.RegistryStr()), path: path}, nil
}

// refLocation is where ref's repository lives.
func refLocation(ref name.Reference) (host, path string) {
	return strings.ToLower(ref.Context().RegistryStr()), ref.Context().RepositoryStr()
}

// Policy is the operator's rule for prebuilt images (spec.image of Functions and
// self-contained FunctionJobs):
//   - under the platform's registry (where builds push <registry>/<namespace>/<name>:…)
//     only the function's own namespace's images, whatever else is allowed: another
//     tenant's built images are theirs, and the platform's pull secret reads them all;
//   - elsewhere only the registries (host[:port][/path]) the operator allowed.
//
// Nothing is fetched to decide.
type Policy struct {
	platform location
	allowed  []location
}

// New is the policy of the platform registry platformRegistry (host[:port][/path], the
// builds' --registry) and the allowed registries.
func New(platformRegistry string, allowed []string) (Policy, error) {
	p := Policy{}
	var err error
	if p.platform, err = parseLocation(platformRegistry); err != nil {
		return Policy{}, fmt.Errorf("platform %w", err)
	}
	for _, a := range allowed {
		if strings.TrimSpace(a) == "" {
			continue
		}
		l, err := parseLocation(a)
		if err != nil {
			return Policy{}, fmt.Errorf("%s: %w", FlagAllowedRegistries, err)
		}
		p.allowed = append(p.allowed, l)
	}
	return p, nil
}

// Refusal is an image the policy does not let namespace run; its message is fixed text
// naming the image's registry and what would allow it.
type Refusal struct{ msg string }

func (r *Refusal) Error() string { return r.msg }

// Check says whether a function in namespace may run ref: nil, or a *Refusal.
func (p Policy) Check(ref name.Reference, namespace string) error {
	host, path := refLocation(ref)
	if p.platform.holds(host, path) {
		own := location{host: p.platform.host, path: joinPath(p.platform.path, namespace)}
		if own.holds(host, path) {
			return nil
		}
		return &Refusal{fmt.Sprintf("%s is in the platform registry %s outside namespace %s's images: a function runs only its own namespace's images from there (%s/…)",
			ref.Context().Name(), p.platform, namespace, own)}
	}
	for _, a := range p.allowed {
		if a.holds(host, path) {
			return nil
		}
	}
	return &Refusal{fmt.Sprintf("registry %s is not allowed for prebuilt images (allowed: %s); the platform's operator sets the list with %s",
		host, p.describeAllowed(namespace), FlagAllowedRegistries)}
}

func (p Policy) describeAllowed(namespace string) string {
	all := []string{p.platform.String() + "/" + namespace + "/…"}
	for _, a := range p.allowed {
		all = append(all, a.String())
	}
	return strings.Join(all, ", ")
}

// OwnImage reports whether image is one of namespace's images in the platform registry
// platformRegistry: the only images the platform's pull secret is attached for. An image
// that does not parse is not.
func OwnImage(platformRegistry, namespace, image string) bool {
	platform, err := parseLocation(platformRegistry)
	if err != nil || namespace == "" {
		return false
	}
	ref, err := name.ParseReference(image)
	if err != nil {
		return false
	}
	host, path := refLocation(ref)
	own := location{host: platform.host, path: joinPath(platform.path, namespace)}
	return own.holds(host, path)
}

func joinPath(prefix, segment string) string {
	if prefix == "" {
		return segment
	}
	return prefix + "/" + segment
}

// trustedHosts are the host:port addresses resolution may dial whatever they resolve to:
// the platform registry's and the allowed registries' (both ports a registry named without
// one is spoken to on).
func (p Policy) trustedHosts() map[string]bool {
	hosts := map[string]bool{}
	for _, l := range append([]location{p.platform}, p.allowed...) {
		if strings.LastIndex(l.host, ":") > strings.LastIndex(l.host, "]") {
			hosts[l.host] = true
			continue
		}
		hosts[l.host+":443"], hosts[l.host+":80"] = true, true
	}
	return hosts
}
