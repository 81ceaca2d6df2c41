// goagg: the benchmark's peer for jsongate's aggregated routes.  It does what KrakenD's
// merger does with its default JSON encoding: for each request it asks the same three
// backends at once, decodes each answer into map[string]any (numbers kept as json.Number,
// as KrakenD's decoder does), puts them under their keys, and encodes the merged map.
//
//	goagg -listen 127.0.0.1:PORT -upstream 127.0.0.1:PORT
//
// A request for /FILE asks the upstream for /FILE three times and answers
// {"a":...,"b":...,"c":...}.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

var keys = []string{"a", "b", "c"}

type result struct {
	value map[string]any
	err   error
}

func fetch(client *http.Client, url string) (map[string]any, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var value map[string]any
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	if err := dec.Decode(&value); err != nil {
		return nil, err
	}
	return value, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	upstream := flag.String("upstream", "127.0.0.1:9000", "the backends' upstream")
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
	base := "http://" + *upstream
	handler := func(w http.ResponseWriter, r *http.Request) {
		results := make([]result, len(keys))
		var wg sync.WaitGroup
		for i := range keys {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				results[i].value, results[i].err = fetch(client, base+r.URL.Path)
			}(i)
		}
		wg.Wait()
		merged := make(map[string]any, len(keys))
		for i, k := range keys {
			if results[i].err != nil {
				http.Error(w, results[i].err.Error(), http.StatusBadGateway)
				return
			}
			merged[k] = results[i].value
		}
		var out bytes.Buffer
		if err := json.NewEncoder(&out).Encode(merged); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(out.Len()))
		w.Write(out.Bytes())
	}
	log.Fatal(http.ListenAndServe(*listen, http.HandlerFunc(handler)))
}
