package postgres

import (
	"testing"
	"time"

	"hookd/internal/store"
	"hookd/internal/testenv"
)

// A batch naming one key twice is published, the last of it winning:
// one INSERT ... ON CONFLICT DO UPDATE may not touch a row twice, and the
// whole batch failed with it.
func TestCircuitsPublishWithARepeatedKey(t *testing.T) {
	s := openURL(t, testenv.PostgresSchema(t))
	err := s.CircuitsPublish(t.Context(), []store.Circuit{
		{Key: "a.example:443", Open: true, RetryIn: time.Minute},
		{Key: "sub_x"}, {Key: "sub_x"},
	})
	t.Logf("CircuitsPublish with sub_x twice: %v", err)
	if err != nil {
		t.Errorf("a batch with one key twice failed whole: %v", err)
	}
	cs, _ := s.CircuitsGet(t.Context(), []string{"a.example:443"})
	if len(cs) != 1 {
		t.Errorf("the open host in the same batch was not published: %+v", cs)
	}
}
