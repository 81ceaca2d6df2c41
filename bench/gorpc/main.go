// gorpc: the benchmark's peer for jsongate's JSON-RPC routes.  It does what a JSON-RPC proxy
// built on Go's encoding/json does: for each request it decodes the batch into its calls
// (map[string]any, numbers kept as json.Number), groups them by the upstream their method
// goes to, encodes each group and posts it to its upstream, all at once, decodes each
// answer, puts the answers back in the order of the calls by id, and encodes the result.
//
//	gorpc -listen 127.0.0.1:PORT -route eth_call=127.0.0.1:P1 -route eth_getLogs=... \
//	    -default 127.0.0.1:P0
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

type routes map[string]string

func (r routes) String() string { return fmt.Sprint(map[string]string(r)) }

func (r routes) Set(v string) error {
	method, addr, ok := strings.Cut(v, "=")
	if !ok {
		return errors.New("expected METHOD=HOST:PORT")
	}
	r[method] = addr
	return nil
}

func decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}

// The key an id is matched by: its JSON text.
func idKey(id any) string {
	b, _ := json.Marshal(id)
	return string(b)
}

func rpcError(id any, code int, message string) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": code, "message": message}}
}

type group struct {
	addr    string
	calls   []map[string]any
	answers []map[string]any
	err     error
}

func post(client *http.Client, url string, g *group) {
	body, err := json.Marshal(g.calls)
	if err != nil {
		g.err = err
		return
	}
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		g.err = err
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		g.err = err
		return
	}
	if resp.StatusCode/100 != 2 {
		g.err = fmt.Errorf("status %d", resp.StatusCode)
		return
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return
	}
	g.err = decode(data, &g.answers)
}

func main() {
	table := routes{}
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	fallback := flag.String("default", "", "upstream of the other methods")
	flag.Var(table, "route", "METHOD=HOST:PORT, the upstream of a method (repeatable)")
	flag.Parse()

	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     120 * time.Second,
		},
	}
	handler := func(w http.ResponseWriter, r *http.Request) {
		data, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var calls []map[string]any
		if err := decode(data, &calls); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		groups := map[string]*group{}
		var order []*group
		for _, c := range calls {
			method, _ := c["method"].(string)
			addr, ok := table[method]
			if !ok {
				addr = *fallback
			}
			g := groups[addr]
			if g == nil {
				g = &group{addr: addr}
				groups[addr] = g
				order = append(order, g)
			}
			g.calls = append(g.calls, c)
		}
		var wg sync.WaitGroup
		for _, g := range order {
			wg.Add(1)
			go func(g *group) {
				defer wg.Done()
				post(client, "http://"+g.addr+r.URL.Path, g)
			}(g)
		}
		wg.Wait()
		byID := map[string]map[string]any{}
		for _, g := range order {
			for _, a := range g.answers {
				byID[g.addr+" "+idKey(a["id"])] = a
			}
		}
		out := make([]any, 0, len(calls))
		for _, c := range calls {
			id, ok := c["id"]
			if !ok {
				continue
			}
			method, _ := c["method"].(string)
			addr, ok := table[method]
			if !ok {
				addr = *fallback
			}
			if a, ok := byID[addr+" "+idKey(id)]; ok {
				out = append(out, a)
			} else {
				out = append(out, rpcError(id, -32603, "Internal error"))
			}
		}
		body, err := json.Marshal(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}
	log.Fatal(http.ListenAndServe(*listen, http.HandlerFunc(handler)))
}
