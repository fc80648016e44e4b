//go:build race

package dispatch

import "testing"

// TestSimulations says where the simulations went: sim_test.go is built
// without -race only.
func TestSimulations(t *testing.T) {
	t.Skip("the synctest simulations run without -race: go test -run TestSim ./internal/dispatch")
}
