package rules

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// NamePattern is an object's name (and a namespace's): a DNS label, at most MaxNameLength.
var NamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// envNamePattern is a variable name every runtime's environment takes.
var envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// EnvReservedPrefix starts the variables the platform sets (SLESS_MODE, SLESS_TIMEOUT_SECONDS, …).
const EnvReservedPrefix = "SLESS_"

// CheckName reports why name is not a valid object name, or nil.
func CheckName(name string) error {
	if len(name) == 0 || len(name) > MaxNameLength || !NamePattern.MatchString(name) {
		return fmt.Errorf("%q is not a valid name: use at most %d lowercase letters, digits and '-', starting and ending with a letter or digit", name, MaxNameLength)
	}
	return nil
}

// CheckEnvName reports why a function may not set the variable name, or nil.
func CheckEnvName(name string) error {
	if !envNamePattern.MatchString(name) {
		return fmt.Errorf("invalid variable name %q: use letters, digits and '_', not starting with a digit", name)
	}
	if strings.HasPrefix(name, EnvReservedPrefix) {
		return fmt.Errorf("variable %q: the %s prefix is reserved for the platform", name, EnvReservedPrefix)
	}
	if slices.Contains(ReservedEnvNames, name) {
		return fmt.Errorf("variable %q is reserved (the platform or the language runtime sets it); reserved: %s and the %s prefix", name, strings.Join(ReservedEnvNames, ", "), EnvReservedPrefix)
	}
	return nil
}
