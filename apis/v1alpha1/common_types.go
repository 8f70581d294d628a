package v1alpha1

import (
	"slices"

	"sless.dev/sless/rules"
)

// Runtime names a language runtime. The enum below is the single list the API accepts;
// buildkit maps each name to its wrapper, base image and entry file.
// +kubebuilder:validation:Enum=go1.23;go1.25;python3.11;python3.12;nodejs20;nodejs22
type Runtime string

const (
	RuntimeGo123     Runtime = "go1.23"
	RuntimeGo125     Runtime = "go1.25"
	RuntimePython311 Runtime = "python3.11"
	RuntimePython312 Runtime = "python3.12"
	RuntimeNode20    Runtime = "nodejs20"
	RuntimeNode22    Runtime = "nodejs22"
)

// Runtimes lists every accepted runtime, in the order of the enum marker above.
var Runtimes = []Runtime{RuntimeGo123, RuntimeGo125, RuntimePython311, RuntimePython312, RuntimeNode20, RuntimeNode22}

// SourceRef points at an uploaded build context in the artifact store.
type SourceRef struct {
	// ContextKey is the object key of the build context,
	// contexts/{namespace}/{name}/{timestamp}.tar.gz.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	ContextKey string `json:"contextKey"`

	// ArchiveKey is the object key of the zip the user uploaded (kept for the source viewer).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ArchiveKey string `json:"archiveKey,omitempty"`

	// SHA256 is the content hash of the build context; the image tag derives from it, so the
	// same source is never built twice.
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	SHA256 string `json:"sha256"`
}

// CodeSpec is what it takes to build and run code: shared by Function and self-contained
// FunctionJobs.
type CodeSpec struct {
	// Runtime is the language runtime.
	// +optional
	Runtime Runtime `json:"runtime,omitempty"`

	// Entrypoint overrides the runtime's default handler ("handler.handle" for Python and
	// Node, package handler's Handle for Go).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_./-]*$`
	Entrypoint string `json:"entrypoint,omitempty"`

	// Env is passed to every instance; rendered in sorted key order so pod specs are
	// deterministic.
	// +optional
	// +kubebuilder:validation:MaxProperties=256
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[A-Za-z_][A-Za-z0-9_]*$') && !k.startsWith('SLESS_') && !(k in ['HOME', 'LD_AUDIT', 'LD_LIBRARY_PATH', 'LD_PRELOAD', 'NODE_OPTIONS', 'NODE_PATH', 'PATH', 'PORT', 'PYTHONHOME', 'PYTHONINSPECT', 'PYTHONPATH', 'PYTHONSTARTUP', 'PYTHONUSERBASE']))",message="env names must match [A-Za-z_][A-Za-z0-9_]*, must not start with SLESS_ and must not be a reserved name (rules.ReservedEnvNames)"
	Env map[string]string `json:"env,omitempty"`

	// SecretEnv sets variables from keys of the namespace's secrets (Secrets labelled
	// sless.dev/secret): rendered as secretKeyRef, so no value is in any object sless writes.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	SecretEnv []SecretEnvVar `json:"secretEnv,omitempty"`

	// SecretFiles mounts secrets as directories of files, one file per key.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=secret
	SecretFiles []SecretFilesMount `json:"secretFiles,omitempty"`

	// MemoryMB is the memory limit of one instance, in MiB.
	// +optional
	// +kubebuilder:default=128
	// +kubebuilder:validation:Minimum=32
	// +kubebuilder:validation:Maximum=16384
	MemoryMB int32 `json:"memoryMB,omitempty"`

	// TimeoutSeconds bounds one invocation; 0 means no limit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=900
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`

	// Source is the uploaded build context. Unset until code is uploaded (unless Image is set).
	// +optional
	Source *SourceRef `json:"source,omitempty"`

	// Image is a prebuilt image; when set, no build runs.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// Protocol is what the image's server speaks on its port: http1 (HTTP/1.1, unset means
	// it; every runtime's wrapper) or h2c (HTTP/2 without TLS, e.g. a gRPC server, for an
	// image only): its Service port then says appProtocol kubernetes.io/h2c, so the KEDA
	// interceptor speaks h2c to it, and readiness is a TCP probe of the port.
	// +optional
	Protocol Protocol `json:"protocol,omitempty"`
}

// Protocol is what a function's server speaks on its port (rules.ProtocolHTTP1, ProtocolH2C).
// +kubebuilder:validation:Enum=http1;h2c
type Protocol string

// SecretNames lists the secrets the code references, sorted, each once.
func (c *CodeSpec) SecretNames() []string {
	var names []string
	for _, e := range c.SecretEnv {
		names = append(names, e.Secret)
	}
	for _, f := range c.SecretFiles {
		names = append(names, f.Secret)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// SecretEnvVar sets the variable Name to the value of Key in the secret Secret.
type SecretEnvVar struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Secret string `json:"secret"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// SecretFilesMount mounts every key of the secret Secret as a file in the directory Path
// (/var/sless/secrets/<secret> when empty).
type SecretFilesMount struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Secret string `json:"secret"`
	// +optional
	// +kubebuilder:validation:MaxLength=255
	Path string `json:"path,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
}

// SecretKeyReference selects one key of a Secret in the same namespace.
type SecretKeyReference struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key within the Secret; defaults to "host" (an amqp:// URL), as KEDA's rabbitmq scaler
	// expects.
	// +optional
	// +kubebuilder:default=host
	Key string `json:"key,omitempty"`
}

// Condition types shared by the kinds.
const (
	// ConditionReady is the summary of a living object (Function, Trigger).
	ConditionReady = "Ready"
	// ConditionBuilt reports the image build of a Function or self-contained FunctionJob.
	ConditionBuilt = rules.StepBuilt
	// ConditionDeployed reports the rendered workloads of a Function.
	ConditionDeployed = rules.StepDeployed
	// ConditionAsync is True while a function with async enabled has a dispatcher draining
	// its asynchronous invocations; the gateway takes them only then.
	ConditionAsync = "Async"
	// ConditionSucceeded is the terminal summary of a FunctionJob run.
	ConditionSucceeded = "Succeeded"
)
