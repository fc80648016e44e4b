package bench

import "math/bits"

// Hist is a fixed-memory log-linear histogram of durations in microseconds:
// values below 16 µs have their own bucket, above that every power of two is
// split into 16 linear sub-buckets, so a quantile is within 6.25 % of the
// true value. It never grows, whatever the number of samples. Not safe for
// concurrent use; callers hold a lock.
type Hist struct {
	Counts [histBuckets]uint64
	N      uint64
}

const (
	histSub     = 16
	histMaxExp  = 42 // 2^42 µs ≈ 51 days: anything longer is clamped
	histBuckets = histSub + (histMaxExp-4+1)*histSub
)

func histIndex(us uint64) int {
	if us < histSub {
		return int(us)
	}
	e := bits.Len64(us) - 1 // us in [2^e, 2^(e+1)), e >= 4
	if e > histMaxExp {
		return histBuckets - 1
	}
	sub := int((us >> (e - 4)) & (histSub - 1))
	return histSub + (e-4)*histSub + sub
}

// histUpper is the largest value that falls in bucket i.
func histUpper(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	e := (i-histSub)/histSub + 4
	sub := uint64((i - histSub) % histSub)
	lo := (uint64(histSub) + sub) << (e - 4)
	return lo + (uint64(1) << (e - 4)) - 1
}

// Add records one sample of us microseconds (negative clock skew counts as 0).
func (h *Hist) Add(us int64) {
	if us < 0 {
		us = 0
	}
	h.Counts[histIndex(uint64(us))]++
	h.N++
}

// Merge adds o's samples to h.
func (h *Hist) Merge(o *Hist) {
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
	h.N += o.N
}

// Sub returns h minus an earlier snapshot of the same histogram.
func (h *Hist) Sub(earlier *Hist) Hist {
	var d Hist
	for i := range h.Counts {
		d.Counts[i] = h.Counts[i] - earlier.Counts[i]
	}
	d.N = h.N - earlier.N
	return d
}

// QuantileMs is the q-quantile (0..1) in milliseconds, reported as the upper
// edge of its bucket; 0 with no samples.
func (h *Hist) QuantileMs(q float64) float64 {
	if h.N == 0 {
		return 0
	}
	rank := uint64(q*float64(h.N-1)) + 1
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= rank {
			return float64(histUpper(i)) / 1000
		}
	}
	return float64(histUpper(histBuckets-1)) / 1000
}

// sparse is the histogram as (bucket, count) pairs, for the wire.
func (h *Hist) sparse() [][2]uint64 {
	var out [][2]uint64
	for i, c := range h.Counts {
		if c != 0 {
			out = append(out, [2]uint64{uint64(i), c})
		}
	}
	return out
}

func histFromSparse(pairs [][2]uint64) Hist {
	var h Hist
	for _, p := range pairs {
		if p[0] < histBuckets {
			h.Counts[p[0]] += p[1]
			h.N += p[1]
		}
	}
	return h
}
