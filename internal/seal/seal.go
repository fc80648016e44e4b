// Package seal keeps secrets sealed at rest with AES-256-GCM under a
// keyring: the first key seals, any key opens. A sealed value names its
// format and its key (sealed:v1:<key id>:<base64url of nonce and
// ciphertext>), so a value under a retired key can be found and sealed
// again (hookd rekey), and one whose key is missing is an error naming
// that key, never taken for plaintext.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Prefix starts every sealed value; the key ID and the payload follow.
const Prefix = "sealed:v1:"

// KeySize is the length of a key: AES-256.
const KeySize = 32

var (
	// ErrUnknownKey: the value was sealed under a key the keyring lacks.
	ErrUnknownKey = errors.New("sealed under a key that is not configured")
	// ErrNotSealed: the value is not in sealed form (plaintext, or damaged).
	ErrNotSealed = errors.New("not sealed")
	// ErrCorrupt: the value names a configured key but does not open with
	// it: damaged, or moved from another row (the context differs).
	ErrCorrupt = errors.New("does not open: damaged, or not sealed for this place")
)

// Keyring holds the keys values are sealed and opened with. It is safe
// for concurrent use.
type Keyring struct {
	keys []key // keys[0] seals
}

type key struct {
	id   string
	aead cipher.AEAD
}

// New makes a keyring of raw 32-byte keys; the first seals. The same key
// twice is an error (it is a mistake in the key list, and harmless only by luck).
func New(raw ...[]byte) (*Keyring, error) {
	if len(raw) == 0 {
		return nil, errors.New("no key given")
	}
	k := &Keyring{}
	seen := map[string]int{}
	for i, b := range raw {
		if len(b) != KeySize {
			return nil, fmt.Errorf("key %d: %d bytes, want %d", i+1, len(b), KeySize)
		}
		id := keyID(b)
		if j, ok := seen[id]; ok {
			return nil, fmt.Errorf("key %d: the same key as key %d", i+1, j+1)
		}
		seen[id] = i
		block, err := aes.NewCipher(b)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		k.keys = append(k.keys, key{id: id, aead: aead})
	}
	return k, nil
}

// Parse reads keys as text: each the standard base64 of 32 bytes (as
// `openssl rand -base64 32` prints), separated by newlines or commas; blank
// entries and lines starting with # are skipped. The first key seals.
// Errors name the key by its position, never its value.
func Parse(text string) (*Keyring, error) {
	var raw [][]byte
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, v := range strings.Split(line, ",") {
			v = strings.TrimSpace(v)
			if v == "" {
				continue
			}
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil || len(b) != KeySize {
				return nil, fmt.Errorf("key %d: not the base64 of %d bytes (make one with: openssl rand -base64 32)", len(raw)+1, KeySize)
			}
			raw = append(raw, b)
		}
	}
	return New(raw...)
}

// NewKey returns a fresh random key in the form Parse reads.
func NewKey() string {
	b := make([]byte, KeySize)
	rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// keyID names a key in sealed values: a short hash of it, so reordering
// the keyring never changes which key a value names, and the ID says
// nothing usable about the key.
func keyID(b []byte) string {
	h := sha256.Sum256(append([]byte("hookd seal key id\x00"), b...))
	return hex.EncodeToString(h[:4])
}

// IDs returns the keys' IDs, the sealing key first.
func (k *Keyring) IDs() []string {
	ids := make([]string, len(k.keys))
	for i, c := range k.keys {
		ids[i] = c.id
	}
	return ids
}

// SealPrefix is how every value sealed under the first key starts.
func (k *Keyring) SealPrefix() string { return Prefix + k.keys[0].id + ":" }

// Seal seals plain under the first key, bound to context (e.g.
// "subscriptions/sub_1/secret"): it opens only with the same context, so a
// sealed value copied to another row or column does not open there.
func (k *Keyring) Seal(plain, context string) string {
	c := k.keys[0]
	head := Prefix + c.id + ":"
	nonce := make([]byte, c.aead.NonceSize(), c.aead.NonceSize()+len(plain)+c.aead.Overhead())
	rand.Read(nonce)
	out := c.aead.Seal(nonce, nonce, []byte(plain), []byte(head+context))
	return head + base64.RawURLEncoding.EncodeToString(out)
}

// Open opens a value Seal made with the same context, under whichever
// configured key it names. ErrNotSealed if it is not in sealed form,
// ErrUnknownKey (naming the key ID) if its key is not configured,
// ErrCorrupt if it does not open.
func (k *Keyring) Open(sealed, context string) (string, error) {
	id, payload, ok := parts(sealed)
	if !ok {
		return "", ErrNotSealed
	}
	var c *key
	for i := range k.keys {
		if k.keys[i].id == id {
			c = &k.keys[i]
		}
	}
	if c == nil {
		return "", fmt.Errorf("%w: key %s (configured: %s)", ErrUnknownKey, id, strings.Join(k.IDs(), ", "))
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || len(b) < c.aead.NonceSize() {
		return "", fmt.Errorf("%w (key %s)", ErrCorrupt, id)
	}
	n := c.aead.NonceSize()
	plain, err := c.aead.Open(nil, b[:n], b[n:], []byte(Prefix+id+":"+context))
	if err != nil {
		return "", fmt.Errorf("%w (key %s)", ErrCorrupt, id)
	}
	return string(plain), nil
}

// Current reports whether v is sealed under the first key: a rekey leaves it.
func (k *Keyring) Current(v string) bool { return strings.HasPrefix(v, k.SealPrefix()) }

// IsSealed reports whether v is in sealed form (under any key).
func IsSealed(v string) bool { return strings.HasPrefix(v, Prefix) }

// KeyOf names the key a sealed value was sealed under; false if v is not
// in sealed form.
func KeyOf(v string) (string, bool) {
	id, _, ok := parts(v)
	return id, ok
}

// parts splits a sealed value into its key ID and payload.
func parts(v string) (id, payload string, ok bool) {
	rest, ok := strings.CutPrefix(v, Prefix)
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, ":")
}
