package store

import (
	"testing"
	"testing/fstest"
)

func TestMigrationsOrderAndRefusals(t *testing.T) {
	ms, err := Migrations(fstest.MapFS{
		"m/0010_later.sql": {Data: []byte("B")},
		"m/0002_first.sql": {Data: []byte("A")},
		"m/README":         {Data: []byte("not a migration")},
	}, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Version != 2 || ms[0].Name != "0002_first.sql" || ms[0].SQL != "A" || ms[1].Version != 10 {
		t.Fatalf("migrations %+v", ms)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"no number":     {"m/first.sql": {}},
		"shared number": {"m/0001_a.sql": {}, "m/1_b.sql": {}},
	} {
		if _, err := Migrations(fsys, "m"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
