package store

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strings"

	"hookd/internal/core"
	"hookd/internal/seal"
)

// Sealed holds a subscription's secret columns as stored: each value sealed
// (seal.Keyring) and bound to its row and column, or "" for none. Every
// backend seals in its write and opens in its read through SealSubscription
// and OpenSubscription, so no path writes a secret in the clear.
type Sealed struct {
	Secret     string
	PrevSecret string
	Headers    string // the JSON object of names and values, sealed whole
}

func sealContext(id, column string) string { return "subscriptions/" + id + "/" + column }

// SealSubscription seals s's secrets and headers under the keyring's first key.
func SealSubscription(k *seal.Keyring, s core.Subscription) (Sealed, error) {
	var out Sealed
	if s.Secret != "" {
		out.Secret = k.Seal(s.Secret, sealContext(s.ID, "secret"))
	}
	if s.PrevSecret != "" {
		out.PrevSecret = k.Seal(s.PrevSecret, sealContext(s.ID, "prev_secret"))
	}
	if len(s.Headers) > 0 {
		b, err := json.Marshal(s.Headers)
		if err != nil {
			return out, fmt.Errorf("subscription %s headers: %w", s.ID, err)
		}
		out.Headers = k.Seal(string(b), sealContext(s.ID, "headers"))
	}
	return out, nil
}

// OpenSubscription opens what SealSubscription sealed into s (s.ID set).
// A value under a key not in the keyring, or not sealed at all, is an
// error naming the subscription and the column (seal.ErrUnknownKey,
// seal.ErrNotSealed): never read as plaintext.
func OpenSubscription(k *seal.Keyring, s *core.Subscription, c Sealed) error {
	var err error
	if s.Secret, err = openColumn(k, s.ID, "secret", c.Secret); err != nil {
		return err
	}
	if s.PrevSecret, err = openColumn(k, s.ID, "prev_secret", c.PrevSecret); err != nil {
		return err
	}
	h, err := openColumn(k, s.ID, "headers", c.Headers)
	if err != nil || h == "" {
		s.Headers = nil
		return err
	}
	if err := json.Unmarshal([]byte(h), &s.Headers); err != nil {
		return fmt.Errorf("subscription %s headers: %w", s.ID, err)
	}
	return nil
}

func openColumn(k *seal.Keyring, id, column, v string) (string, error) {
	if v == "" {
		return "", nil
	}
	plain, err := k.Open(v, sealContext(id, column))
	switch {
	case errors.Is(err, seal.ErrNotSealed):
		return "", fmt.Errorf("opening subscription %s %s (plaintext from an older release is sealed at the next start or by hookd rekey): %w", id, column, err)
	case errors.Is(err, seal.ErrUnknownKey):
		return "", fmt.Errorf("opening subscription %s %s (add the key it names to --secret-key-file or HOOKD_SECRET_KEY): %w", id, column, err)
	case err != nil:
		return "", fmt.Errorf("opening subscription %s %s: %w", id, column, err)
	}
	return plain, nil
}

// ResealRow is what SubscriptionReseal reads and may rewrite of one row.
type ResealRow struct {
	ID  string
	URL string
	Sealed
}

// ResealParams says which rows SubscriptionReseal looks at.
type ResealParams struct {
	// All: also seal again what is under another key than the first (a
	// rekey). Otherwise only what a release before sealing left: plaintext
	// secrets, and credentials in URLs (Open does that).
	All   bool
	After string // the last ID of the previous batch; "" to start
	Limit int
}

// ResealResult is what one SubscriptionReseal batch did.
type ResealResult struct {
	Looked  int    // rows looked at: fewer than the limit means none is left
	Changed int    // rows rewritten
	Next    string // After for the next batch
}

// ResealMark is what every stored value that needs no work starts with:
// the backends select the rows where a value does not, or whose URL has an
// @ (which may be userinfo), and give each to Reseal.
func ResealMark(k *seal.Keyring, all bool) string {
	if all {
		return k.SealPrefix()
	}
	return seal.Prefix
}

// Reseal brings one row to what the keyring and this release want: a
// plaintext secret sealed; with all, a value under another key opened and
// sealed under the first; credentials in the URL (user:password@, which
// a release before headers sent as Basic auth) moved to an Authorization
// header, unless the row has one, and the URL kept otherwise as it was.
// It reports whether anything changed.
func Reseal(k *seal.Keyring, r ResealRow, all bool) (ResealRow, bool, error) {
	out := r
	var changed bool
	for _, c := range []struct {
		column string
		v      *string
	}{{"secret", &out.Secret}, {"prev_secret", &out.PrevSecret}, {"headers", &out.Headers}} {
		v := *c.v
		switch {
		case v == "", k.Current(v), seal.IsSealed(v) && !all:
			continue
		case !seal.IsSealed(v): // plaintext from before sealing
			*c.v = k.Seal(v, sealContext(r.ID, c.column))
		default:
			plain, err := k.Open(v, sealContext(r.ID, c.column))
			if err != nil {
				return r, false, fmt.Errorf("subscription %s %s: %w", r.ID, c.column, err)
			}
			*c.v = k.Seal(plain, sealContext(r.ID, c.column))
		}
		changed = true
	}
	bare, auth, ok := splitUserinfo(r.URL)
	if !ok {
		return out, changed, nil
	}
	var sub core.Subscription
	sub.ID = r.ID
	if err := OpenSubscription(k, &sub, Sealed{Headers: out.Headers}); err != nil {
		return r, false, err
	}
	if _, has := sub.Headers["Authorization"]; !has {
		h := maps.Clone(sub.Headers)
		if h == nil {
			h = map[string]string{}
		}
		h["Authorization"] = auth
		sealed, err := SealSubscription(k, core.Subscription{ID: r.ID, Headers: h})
		if err != nil {
			return r, false, err
		}
		out.Headers = sealed.Headers
	}
	out.URL = bare
	return out, true, nil
}

// splitUserinfo returns raw without its user:password@ and the Basic
// Authorization value an HTTP client makes of it; ok is false if raw
// has none. Only the userinfo is cut: the rest stays byte for byte.
func splitUserinfo(raw string) (bare, auth string, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw, "", false
	}
	scheme, rest, found := strings.Cut(raw, "://")
	if !found {
		return raw, "", false
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return raw, "", false
	}
	pw, _ := u.User.Password()
	auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw))
	return scheme + "://" + rest[at+1:], auth, true
}
