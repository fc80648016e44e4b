package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// apiClient calls hookd's public REST API with the admin token.
type apiClient struct {
	base, token string
	http        *http.Client
}

func newAPIClient(base, token string, conns int) *apiClient {
	tr := &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        conns + 16,
		MaxIdleConnsPerHost: conns + 16,
		IdleConnTimeout:     30 * time.Second,
	}
	return &apiClient{base: base, token: token, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// do sends body (JSON-encoded unless it is []byte) and returns the status
// and raw answer.
func (c *apiClient) do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, out, err
}

// must is do that wants status want and decodes the answer into out (if non-nil).
func (c *apiClient) must(ctx context.Context, want int, method, path string, body, out any) error {
	status, raw, err := c.do(ctx, method, path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if status != want {
		return fmt.Errorf("%s %s: answered %d, want %d: %s", method, path, status, want, bytes.TrimSpace(raw))
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

type subscription struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
}

func (c *apiClient) subscribe(ctx context.Context, fields map[string]any) (subscription, error) {
	var s subscription
	err := c.must(ctx, http.StatusCreated, "POST", "/v1/subscriptions", fields, &s)
	return s, err
}

func (c *apiClient) patch(ctx context.Context, id string, fields map[string]any) error {
	return c.must(ctx, http.StatusOK, "PATCH", "/v1/subscriptions/"+id, fields, nil)
}

func (c *apiClient) unsubscribe(ctx context.Context, id string) error {
	return c.must(ctx, http.StatusNoContent, "DELETE", "/v1/subscriptions/"+id, nil, nil)
}
