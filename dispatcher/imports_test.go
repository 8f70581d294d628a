package dispatcher_test

import (
	"strings"
	"testing"

	"sless.dev/sless/test/testkit"
)

// TestNoBrokerImport keeps the dispatcher's core broker-neutral: a queue kind brings its
// broker's client in its own package (a dispatcher.Source, such as
// triggers/rabbitmq/amqpsource), and the core imports no trigger kind.
func TestNoBrokerImport(t *testing.T) {
	for pkg := range testkit.Imports(t) {
		if pkg == "github.com/rabbitmq/amqp091-go" || strings.HasPrefix(pkg, "sless.dev/sless/triggers") {
			t.Errorf("the dispatcher depends on %s; a source kind's package implements dispatcher.Source instead", pkg)
		}
	}
}
