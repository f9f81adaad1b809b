package diagnose

import (
	"os"
	"testing"

	"github.com/cudatrace/cudatrace/tracer/launch"
)

func TestMain(m *testing.M) {
	launch.RunLoaderIfRequested() // the ptrace fallback launches this binary as the loader
	os.Exit(m.Run())
}
