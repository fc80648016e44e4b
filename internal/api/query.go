package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// queryParams are the query parameters each route of hookd's own API takes,
// by pattern ("GET /v1/events"), as openapi.json documents them: the one
// list, so a parameter documented is one taken. Ignored, a misspelt filter
// (?stat=failed) or another list's (?status= on a subscription's
// deliveries) answered the unfiltered page, which the caller read as the
// filtered one.
var queryParams = queryParamsOf(openAPI)

func queryParamsOf(doc []byte) map[string][]string {
	type param struct {
		Ref  string `json:"$ref"`
		Name string `json:"name"`
		In   string `json:"in"`
	}
	var d struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Parameters map[string]param `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		panic("api: openapi.json: " + err.Error())
	}
	names := func(ps []param) []string {
		var out []string
		for _, p := range ps {
			if p.Ref != "" {
				p = d.Components.Parameters[strings.TrimPrefix(p.Ref, "#/components/parameters/")]
			}
			if p.In == "query" {
				out = append(out, p.Name)
			}
		}
		return out
	}
	out := map[string][]string{}
	for path, item := range d.Paths {
		var shared []param
		if raw, ok := item["parameters"]; ok {
			if err := json.Unmarshal(raw, &shared); err != nil {
				panic("api: openapi.json: " + path + ": " + err.Error())
			}
		}
		for method, raw := range item {
			var op struct {
				Parameters []param `json:"parameters"`
			}
			if method == "parameters" || json.Unmarshal(raw, &op) != nil {
				continue // a path item's summary and the like are no operation
			}
			ns := append(names(op.Parameters), names(shared)...)
			slices.Sort(ns)
			out[strings.ToUpper(method)+" "+path] = slices.Compact(ns)
		}
	}
	return out
}

// badQuery refuses a query parameter route does not take, and one given
// more than once: every parameter takes one value, and of two the handler
// would read the first. (The handlers take an empty value of one they
// know as none.) A pair with a ';' is refused too: URL.Query drops it
// unread, so ?state=failed;limit=5 answered the unfiltered page.
func badQuery(route, raw string) error {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return errBadRequest("query", "cannot be read: parameters are name=value pairs separated by '&' (a ';' separates none)")
	}
	known := queryParams[route]
	for _, name := range slices.Sorted(maps.Keys(q)) {
		switch {
		case name == "":
			return errBadRequest("query", "holds a parameter with no name")
		case !slices.Contains(known, name):
			if len(known) == 0 {
				return errBadRequest(name, fmt.Sprintf("is not a query parameter of %s, which takes none", route))
			}
			return errBadRequest(name, fmt.Sprintf("is not a query parameter of %s, which takes %s", route, strings.Join(known, ", ")))
		case len(q[name]) > 1:
			return errBadRequest(name, "is given more than once (a parameter takes one value; where it takes a list, the list is comma-separated)")
		}
	}
	return nil
}
