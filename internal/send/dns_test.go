package send

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// dnsServer is a tiny DNS server on loopback UDP. It answers A and AAAA
// questions with what answer returns for the name (lower case, no trailing
// dot) and the how-many-th question of that type it is (0-based); names
// with no answer get an empty NOERROR answer.
type dnsServer struct {
	conn   net.PacketConn
	answer func(name string, qtype uint16, n int) []netip.Addr

	mu    sync.Mutex
	asked map[uint16]int // questions per type
}

const (
	dnsA    = 1
	dnsAAAA = 28
)

func newDNSServer(t *testing.T, answer func(name string, qtype uint16, n int) []netip.Addr) *dnsServer {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{conn: conn, answer: answer, asked: map[uint16]int{}}
	done := make(chan struct{})
	t.Cleanup(func() { conn.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if reply := s.reply(buf[:n]); reply != nil {
				conn.WriteTo(reply, from)
			}
		}
	}()
	return s
}

// resolver is a Go resolver that asks only this server.
func (s *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.conn.LocalAddr().String())
	}}
}

// count is how many questions of qtype were asked.
func (s *dnsServer) count(qtype uint16) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[qtype]
}

// reply builds the answer to one query: its header and question echoed,
// then one record per address of the asked type.
func (s *dnsServer) reply(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	var labels []string
	i := 12
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	question := q[12 : i+5]
	qtype := binary.BigEndian.Uint16(q[i+1 : i+3])
	s.mu.Lock()
	n := s.asked[qtype]
	s.asked[qtype]++
	s.mu.Unlock()
	var addrs []netip.Addr
	for _, a := range s.answer(strings.ToLower(strings.Join(labels, ".")), qtype, n) {
		if (qtype == dnsA && a.Is4()) || (qtype == dnsAAAA && a.Is6()) {
			addrs = append(addrs, a)
		}
	}
	out := make([]byte, 12, 512)
	copy(out, q[:2])                                        // id
	binary.BigEndian.PutUint16(out[2:], 0x8180)             // response, recursion desired and available, NOERROR
	binary.BigEndian.PutUint16(out[4:], 1)                  // one question
	binary.BigEndian.PutUint16(out[6:], uint16(len(addrs))) // answers
	out = append(out, question...)
	for _, a := range addrs {
		b := a.AsSlice()
		out = append(out, 0xc0, 12) // the question's name
		out = binary.BigEndian.AppendUint16(out, qtype)
		out = binary.BigEndian.AppendUint16(out, 1) // IN
		out = binary.BigEndian.AppendUint32(out, 0) // TTL: never cache
		out = binary.BigEndian.AppendUint16(out, uint16(len(b)))
		out = append(out, b...)
	}
	return out
}
