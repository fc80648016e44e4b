package core

import (
	"hash/fnv"
	"math/rand/v2"
	"time"
)

const (
	MaxPayloadBytes        = 256 << 10 // an event's payload
	MaxResponseHead        = 1 << 10   // stored per attempt
	DefaultTimeout         = 10 * time.Second
	MaxTimeout             = 30 * time.Second
	MaxRetryAfter          = time.Hour
	SecretGracePeriod      = 24 * time.Hour // a rotated-out secret keeps signing this long
	DefaultHostConcurrency = 10
	NumShards              = 256
	MinRetryDelay          = time.Second
	MaxRetryDelay          = 24 * time.Hour
	MaxRetrySteps          = 20
	MaxHeaders             = 20      // endpoint headers per subscription
	MaxHeadersBytes        = 4 << 10 // their names and values together
)

// DefaultRetrySchedule: 8 tries over about 21 hours.
var DefaultRetrySchedule = []time.Duration{
	5 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute,
	2 * time.Hour, 6 * time.Hour, 12 * time.Hour,
}

// Jitter spreads d uniformly over ±20% so retries from one outage do not
// arrive together.
func Jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// ShardOf places a destination host on one of NumShards shards.
func ShardOf(host string) int {
	h := fnv.New32a()
	h.Write([]byte(host))
	return int(h.Sum32() % NumShards)
}
