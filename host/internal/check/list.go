package check

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// errListExpired is a list whose continue token expired (410 Gone) before
// its last page: its pages so far are no longer a consistent list.
var errListExpired = errors.New("the list's continue token expired")

// listPages lists a collection page by page (limit and continue), one
// request at a time, and decodes each answer as it arrives: decodeItem is
// handed the decoder positioned at each item of "items" in turn and must
// consume exactly that item. So at most one page is ever requested, and of
// it only the item being decoded is held, whatever the collection's size.
func (c *client) listPages(ctx context.Context, path, accept string, pageSize int, what string, decodeItem func(*json.Decoder) error) error {
	query := url.Values{"limit": {strconv.Itoa(pageSize)}}
	for {
		next, err := c.listPage(ctx, path, query, accept, what, decodeItem)
		if err != nil {
			return err
		}
		if next == "" {
			return nil
		}
		query.Set("continue", next)
	}
}

// listPage requests and decodes one page, returning its continue token.
func (c *client) listPage(ctx context.Context, path string, query url.Values, accept, what string, decodeItem func(*json.Decoder) error) (string, error) {
	resp, err := c.get(ctx, path, query, accept)
	switch {
	case isStatus(err, http.StatusGone) && query.Has("continue"):
		return "", errListExpired
	case err != nil:
		return "", c.requestError(what, err)
	}
	defer closeBody(resp)
	dec := json.NewDecoder(resp.Body)
	malformed := func(err error) error {
		return fmt.Errorf("%s: %s: the answer is not a list: %w", c.where(), what, err)
	}
	if err := expectDelim(dec, '{'); err != nil {
		return "", malformed(err)
	}
	var next string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", malformed(err)
		}
		switch tok {
		case "metadata":
			var meta struct {
				Continue string `json:"continue"`
			}
			if err := dec.Decode(&meta); err != nil {
				return "", malformed(err)
			}
			next = meta.Continue
		case "items":
			if err := decodeItems(dec, decodeItem); err != nil {
				return "", malformed(err)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", malformed(err)
			}
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return "", malformed(err)
	}
	return next, nil
}

func decodeItems(dec *json.Decoder, decodeItem func(*json.Decoder) error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil { // "items": null
		return nil
	}
	if tok != json.Delim('[') {
		return fmt.Errorf("items is %v, not an array", tok)
	}
	for dec.More() {
		if err := decodeItem(dec); err != nil {
			return err
		}
	}
	return expectDelim(dec, ']')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != want {
		return fmt.Errorf("found %v where %v was expected", tok, want)
	}
	return nil
}

// listAll lists a collection with listPages and restarts it from the first
// page when its continue token expires, at most a few times; reset is called
// before every restart so that the caller can drop what it gathered.
func (c *client) listAll(ctx context.Context, path, accept string, pageSize int, what string, reset func(), decodeItem func(*json.Decoder) error) error {
	const attempts = 3
	for attempt := 1; ; attempt++ {
		err := c.listPages(ctx, path, accept, pageSize, what, decodeItem)
		if !errors.Is(err, errListExpired) {
			return err
		}
		if attempt == attempts {
			return fmt.Errorf("%s: %s: the list's continue token expired %d times in a row; use a larger --chunk-size", c.where(), what, attempts)
		}
		reset()
	}
}

// listItems lists a collection of API configuration objects (CRDs, webhook
// configurations, ...) whole, decoding each item into a new T.
func listItems[T any](ctx context.Context, c *client, path string, pageSize int, what string) ([]T, error) {
	var items []T
	err := c.listAll(ctx, path, acceptJSON, pageSize, what, func() { items = nil }, func(dec *json.Decoder) error {
		var item T
		if err := dec.Decode(&item); err != nil {
			return err
		}
		items = append(items, item)
		return nil
	})
	return items, err
}
