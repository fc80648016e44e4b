package testenv

import (
	"testing"

	"hookd/internal/seal"
)

// Keys returns a keyring of one fresh key, for a store opened in a test.
func Keys(tb testing.TB) *seal.Keyring {
	tb.Helper()
	k, err := seal.Parse(seal.NewKey())
	if err != nil {
		tb.Fatal(err)
	}
	return k
}
