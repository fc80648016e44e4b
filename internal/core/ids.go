// Package core holds hookd's domain types, their states and validation rules.
// It depends on nothing but the standard library.
package core

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"sync"
	"time"
)

// crockford is the ULID alphabet: sortable as text, no ambiguous letters.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

var idMu sync.Mutex
var lastMs uint64
var lastRand [10]byte

// NewID returns prefix + "_" + a ULID: 48 bits of milliseconds then 80 bits of
// randomness, monotonic within a millisecond, so IDs sort by creation time.
func NewID(prefix string) string {
	ms := uint64(time.Now().UnixMilli())
	idMu.Lock()
	if ms <= lastMs {
		ms = lastMs
		// Same millisecond: increment the random part so order still holds.
		for i := len(lastRand) - 1; i >= 0; i-- {
			lastRand[i]++
			if lastRand[i] != 0 {
				break
			}
		}
	} else {
		lastMs = ms
		rand.Read(lastRand[:])
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], ms<<16)
	copy(b[6:], lastRand[:])
	idMu.Unlock()
	return prefix + "_" + encodeULID(b)
}

// IDFloor is the least ID NewID(prefix) can make at t or later: the prefix
// and t's millisecond, with no random part. IDs made in [t, u) sort in
// [IDFloor(t), IDFloor(u)), so a range of them is a range of time.
func IDFloor(prefix string, t time.Time) string {
	ms := uint64(max(t.UnixMilli(), 0))
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], ms<<16)
	return prefix + "_" + encodeULID(b)[:10]
}

func encodeULID(b [16]byte) string {
	// 128 bits as 26 base32 characters, most significant first (2 pad bits lead).
	var out [26]byte
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// IDTime is the millisecond a NewID was made in (never before the wall
// clock's at the time: the IDs of one millisecond share it, and a clock
// stepped back keeps the last). ok is false for anything NewID did not make.
func IDTime(id string) (t time.Time, ok bool) {
	_, ulid, found := strings.Cut(id, "_")
	if !found || len(ulid) != 26 {
		return time.Time{}, false
	}
	var ms uint64
	for k, c := range []byte(ulid) {
		i := strings.IndexByte(crockford, c)
		if i < 0 {
			return time.Time{}, false
		}
		if k < 10 { // 2 pad bits and 48 of milliseconds
			ms = ms<<5 | uint64(i)
		}
	}
	return time.UnixMilli(int64(ms)).UTC(), ms < 1<<48
}
