package lifecycle

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/shed"
	"hookd/internal/store"
)

// docRow is a row of docs/api.md's table of operational events: its type,
// and the fields its data column names (the backticked words outside
// parentheses).
var (
	docRow   = regexp.MustCompile("^\\| `(hookd\\.[a-z._]+)` \\|[^|]*\\|([^|]*)\\|$")
	docParen = regexp.MustCompile(`\([^()]*\)`)
	docField = regexp.MustCompile("`([a-z_]+)`")
)

// Every operational event's payload has exactly the fields docs/api.md
// lists for it.
func TestPayloadsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string][]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		m := docRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var fields []string
		for _, f := range docField.FindAllStringSubmatch(docParen.ReplaceAllString(m[2], ""), -1) {
			fields = append(fields, f[1])
		}
		slices.Sort(fields)
		documented[m[1]] = fields
	}
	for typ, p := range map[string]map[string]any{
		TypeFailing:         failingPayload(&core.Subscription{}, Failure{}, store.DeliveryStats{}),
		TypeRecovered:       recoveredPayload(store.FailingSubscription{}, core.Attempt{}, time.Now()),
		TypeDisabled:        disabledPayload(core.Subscription{}, store.DeliveryStats{}),
		TypeReplayCompleted: replayPayload(core.ReplayJob{}, ""),
		TypeShedding:        sheddingPayload(&core.Subscription{}, shed.Change{}, 0),
		TypeSheddingEnded:   sheddingEndedPayload(&core.Subscription{}, shed.Change{}),
	} {
		var fields []string
		for k := range p {
			fields = append(fields, k)
		}
		slices.Sort(fields)
		doc, ok := documented[typ]
		if !ok {
			t.Errorf("%s: no row in docs/api.md's table of operational events", typ)
		} else if !slices.Equal(doc, fields) {
			t.Errorf("%s: docs/api.md lists %v, the payload has %v", typ, doc, fields)
		}
	}
}
