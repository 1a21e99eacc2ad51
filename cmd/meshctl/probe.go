package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/pkg/api"
)

// probeBodyBytes bounds how much of a probed answer is read and shown.
const probeBodyBytes = 4 << 10

// probeCmd is `meshctl probe URL`: a health check that needs nothing but
// this binary, for images without a shell or curl (the compose file's
// healthchecks run it against locationd's /readyz and meshnode's /healthz).
func probeCmd(g *globals, out io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "probe URL",
		Short: "GET a health URL (e.g. http://127.0.0.1:7101/healthz): exit 0 on a 2xx answer, 1 otherwise",
		Long: `GET URL once, bounded by --timeout, and exit 0 if the answer is 2xx, printing
its status and the first line of its body; otherwise exit 1 with one error
line: "meshctl: unavailable: GET URL: <status>: <first line of the body>" (or
the connection error). Redirects are not followed.

It is a health check for containers that have no shell or curl, e.g.
  meshctl --timeout 2s probe http://127.0.0.1:7070/readyz   # locationd reaches etcd
  meshctl --timeout 2s probe http://127.0.0.1:7101/healthz  # meshnode's lease is valid`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := url.Parse(args[0])
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageError{err: fmt.Errorf("probe: %q is not a URL like http://127.0.0.1:7101/healthz", args[0])}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			hc, err := g.httpClient()
			if err != nil {
				return err
			}
			status, line, err := probe(ctx, hc, u.String())
			if err != nil {
				return &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("GET %s: %v", u, err)}
			}
			if status/100 != 2 {
				msg := fmt.Sprintf("GET %s: %d %s", u, status, http.StatusText(status))
				if line != "" {
					msg += ": " + line
				}
				return &api.Error{Code: api.CodeUnavailable, Message: msg, Status: status}
			}
			if line == "" {
				line = http.StatusText(status)
			}
			_, err = fmt.Fprintf(out, "%d %s\n", status, line)
			return err
		},
	}
}

// probe GETs u and returns the status and the first non-empty line of the
// body.
func probe(ctx context.Context, base *http.Client, u string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, "", err
	}
	hc := &http.Client{Transport: base.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, probeBodyBytes))
	if err != nil {
		return resp.StatusCode, "", err
	}
	for l := range bytes.Lines(body) {
		if s := strings.Join(strings.Fields(string(l)), " "); s != "" {
			return resp.StatusCode, s, nil
		}
	}
	return resp.StatusCode, "", nil
}
