package seal

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func mustParse(t *testing.T, text string) *Keyring {
	t.Helper()
	k, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpensUnderAnyKeyOfTheRing(t *testing.T) {
	a, b := NewKey(), NewKey()
	old := mustParse(t, a)
	ring := mustParse(t, b+"\n"+a) // b seals now, a still opens

	underA := old.Seal("whsec_abc", "subscriptions/sub_1/secret")
	if strings.Contains(underA, "whsec_abc") || !strings.HasPrefix(underA, Prefix+old.IDs()[0]+":") {
		t.Fatalf("sealed form %q: want %s<key id>: and no plaintext", underA, Prefix)
	}
	if got, err := ring.Open(underA, "subscriptions/sub_1/secret"); err != nil || got != "whsec_abc" {
		t.Fatalf("ring [b, a] opening a value under a: %q, %v", got, err)
	}
	underB := ring.Seal("whsec_abc", "subscriptions/sub_1/secret")
	if id, ok := KeyOf(underA); !ok || id != old.IDs()[0] {
		t.Errorf("KeyOf a value sealed under a: %q, %v; want %s", id, ok, old.IDs()[0])
	}
	if id, ok := KeyOf("whsec_abc"); ok {
		t.Errorf("KeyOf plaintext: %q, want none", id)
	}
	if !ring.Current(underB) || ring.Current(underA) {
		t.Fatalf("Current: under b %v (want true), under a %v (want false)", ring.Current(underB), ring.Current(underA))
	}
	// A fresh nonce each time: the same secret never seals the same twice.
	if again := ring.Seal("whsec_abc", "subscriptions/sub_1/secret"); again == underB {
		t.Fatal("two seals of one value are identical")
	}
}

func TestOpenRefusesWhatItCannotOpen(t *testing.T) {
	a, b := NewKey(), NewKey()
	ka, kb := mustParse(t, a), mustParse(t, b)
	v := ka.Seal("whsec_abc", "subscriptions/sub_1/secret")

	_, err := kb.Open(v, "subscriptions/sub_1/secret")
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), ka.IDs()[0]) {
		t.Errorf("a key not in the ring: %v, want ErrUnknownKey naming key %s", err, ka.IDs()[0])
	}
	if _, err := ka.Open("whsec_abc", "subscriptions/sub_1/secret"); !errors.Is(err, ErrNotSealed) {
		t.Errorf("plaintext: %v, want ErrNotSealed (never the plaintext back)", err)
	}
	if _, err := ka.Open(v, "subscriptions/sub_2/secret"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("moved to another row: %v, want ErrCorrupt", err)
	}
	tampered := v[:len(v)-2] + "AA"
	if tampered == v {
		tampered = v[:len(v)-2] + "BB"
	}
	if _, err := ka.Open(tampered, "subscriptions/sub_1/secret"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("tampered: %v, want ErrCorrupt", err)
	}
	if _, err := ka.Open(ka.SealPrefix()+"!!", "x"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("not base64: %v, want ErrCorrupt", err)
	}
}

func TestParse(t *testing.T) {
	a, b := NewKey(), NewKey()
	k := mustParse(t, "# sealing key first\n"+a+"\n\n  "+b+"  \n")
	k2 := mustParse(t, a+", "+b)
	if got, want := strings.Join(k.IDs(), ","), strings.Join(k2.IDs(), ","); got != want || len(k.IDs()) != 2 {
		t.Fatalf("lines %s, commas %s: want the same two keys", got, want)
	}
	short := base64.StdEncoding.EncodeToString([]byte("too short"))
	for name, text := range map[string]string{
		"empty":     "\n# nothing\n",
		"short":     a + "\n" + short,
		"not b64":   a + ",not-base64!",
		"duplicate": a + "\n" + b + "\n" + a,
	} {
		_, err := Parse(text)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), a) || strings.Contains(err.Error(), short) {
			t.Errorf("%s: the error %q shows a key", name, err)
		}
	}
	if _, err := Parse(a + "\n" + short); err == nil || !strings.Contains(err.Error(), "key 2") {
		t.Errorf("short second key: %v, want it named as key 2", err)
	}
}
