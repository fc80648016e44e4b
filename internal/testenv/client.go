package testenv

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// Client calls hookd's API with one bearer token.
type Client struct {
	T     testing.TB
	Base  string
	Token string
}

// Do sends a JSON body (nil for none; a string is sent raw) and decodes
// the JSON answer into a map.
func (c *Client) Do(method, path string, body any) (int, map[string]any) {
	c.T.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			c.T.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, c.Base+path, rd)
	if err != nil {
		c.T.Fatal(err)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			c.T.Fatalf("%s %s: answer is not a JSON object: %s", method, path, raw)
		}
	}
	return resp.StatusCode, out
}

// Must is Do that fails the test unless the status is want.
func (c *Client) Must(want int, method, path string, body any) map[string]any {
	c.T.Helper()
	status, out := c.Do(method, path, body)
	if status != want {
		c.T.Fatalf("%s %s: status %d, want %d: %v", method, path, status, want, out)
	}
	return out
}
