package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"unicode/utf8"
)

// minAdminToken is the length under which the admin token is called weak:
// 32 characters of base64 hold 192 bits; a short word holds a guess.
const minAdminToken = 32

// adminToken resolves the admin token from --admin-token (or
// HOOKD_ADMIN_TOKEN) or --admin-token-file (or HOOKD_ADMIN_TOKEN_FILE), at
// most one of them; "" if neither is set. It warns, without refusing (local
// development and scripts keep working), of a token that is short, given
// on the command line (where other users of the machine see it in ps), or
// in a file others may read.
func adminToken(fs *flag.FlagSet, token, file string, log *slog.Logger) (string, error) {
	if token != "" && file != "" {
		return "", fmt.Errorf("--admin-token (or HOOKD_ADMIN_TOKEN) and --admin-token-file (or HOOKD_ADMIN_TOKEN_FILE) are mutually exclusive: give one")
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--admin-token-file: %w", err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return "", fmt.Errorf("--admin-token-file %s: the file holds no token", file)
		}
		if fi, err := os.Stat(file); err == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn("the admin token file can be read by other users of this machine; chmod 600 it",
				"file", file, "mode", fmt.Sprintf("%#o", fi.Mode().Perm()))
		}
	}
	if token == "" {
		return "", nil
	}
	fs.Visit(func(f *flag.Flag) { // flags given on the command line, not from the environment
		if f.Name == "admin-token" {
			log.Warn("the admin token was given on the command line, where other users of this machine can read it (ps, /proc); use --admin-token-file or HOOKD_ADMIN_TOKEN")
		}
	})
	if n := utf8.RuneCountInString(token); n < minAdminToken {
		log.Warn("the admin token is weak: shorter than 32 characters; use a long random one (e.g. openssl rand -base64 32)",
			"length", n)
	}
	return token, nil
}
