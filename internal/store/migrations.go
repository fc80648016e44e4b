package store

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one numbered schema step of a backend.
type Migration struct {
	Version int
	Name    string // file name, NNNN_what.sql
	SQL     string
}

// Migrations reads a backend's migrations: the files dir/NNNN_name.sql of
// fsys, in version order. Two files with one number, or a name that does
// not start with a number and _, is an error.
func Migrations(fsys fs.FS, dir string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, n := range names {
		base := path.Base(n)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a number and _", base)
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: base, SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share a number", ms[i-1].Name, ms[i].Name)
		}
	}
	return ms, nil
}

// CheckNotNewer refuses a database that recorded a migration this build
// does not know: a newer release wrote it, and this one would read and
// write it without what that migration changed (a rolled-back node once
// took events and failed every delivery on secrets it could not read).
func CheckNotNewer(ms []Migration, applied int) error {
	known := 0
	if len(ms) > 0 {
		known = ms[len(ms)-1].Version
	}
	if applied > known {
		return fmt.Errorf("the database's schema is at migration %d, newer than this build knows (%d): a newer hookd migrated it; "+
			"run that release (a rollback needs a backup taken before the upgrade)", applied, known)
	}
	return nil
}
