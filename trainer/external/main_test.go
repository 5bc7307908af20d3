package external_test

import (
	"testing"

	"github.com/nomad-train/nomad-train/internal/testtmp"
)

// The workers these tests start leave their temporary directories behind
// (they exit inside Fit); testtmp removes them with its own.
func TestMain(m *testing.M) { testtmp.Main(m) }
