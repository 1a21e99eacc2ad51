package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

// The checks of the names and addresses a command line gives, made before
// any request: a value that does not parse is a usage error (exit status 2)
// with the code the API would answer, "meshctl: invalid_argument: <what>:
// <why>", and nothing is sent. A name like "../owners" would otherwise name
// another route of locationd, and an address like "bad addr" would only
// fail when the request's deadline passed.

// badArgument is the usage error of what (an argument, or a flag) whose value
// does not parse.
func badArgument(what string, err error) error {
	return usageError{err: fmt.Errorf("%s: %w", what, err), code: api.CodeInvalidArgument}
}

// parseObject parses an object name, actor/<type>/<id> or group/<id>.
func parseObject(what, name string) (keyspace.Object, error) {
	obj, err := keyspace.ParseObject(name)
	if err != nil {
		return obj, badArgument(what, err)
	}
	return obj, nil
}

// parseKind parses an object name of one kind (keyspace.KindActor or
// keyspace.KindGroup).
func parseKind(what, name, kind string) (keyspace.Object, error) {
	obj, err := parseObject(what, name)
	if err != nil || obj.Kind == kind {
		return obj, err
	}
	want := "a group (want group/<id>)"
	if kind == keyspace.KindActor {
		want = "an actor (want actor/<type>/<id>)"
	}
	return obj, badArgument(what, fmt.Errorf("%q is not %s", name, want))
}

// checkOwnerID checks an owner id (a node's name).
func checkOwnerID(what, id string) error {
	if err := keyspace.ValidateOwnerID(id); err != nil {
		return badArgument(what, err)
	}
	return nil
}

// checkHost accepts an IP address (an IPv6 one with its zone) or a DNS name:
// letters, digits, '-', '_' and '.'.
func checkHost(host string) error {
	if host == "" {
		return errors.New("no host")
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("host %q has byte %q (want an IP address or a DNS name)", host, c)
		}
	}
	return nil
}

// checkPort accepts a decimal port 1..65535.
func checkPort(port string) error {
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("port %q is not a number 1..65535", port)
	}
	return nil
}

// checkHostPort checks the value of flag as host:port, e.g. 127.0.0.1:7100.
func checkHostPort(flag, s string) error {
	host, port, err := net.SplitHostPort(s)
	if ae := new(net.AddrError); errors.As(err, &ae) {
		err = errors.New(ae.Err) // without repeating the address
	}
	if err == nil {
		if err = checkHost(host); err == nil {
			err = checkPort(port)
		}
	}
	if err != nil {
		return badArgument(flag, fmt.Errorf("%q is not host:port like 127.0.0.1:7100: %w", s, err))
	}
	return nil
}

// checkHTTPURL checks the value of flag as an http or https URL with a host
// (and a path, but no query or fragment), e.g. http://127.0.0.1:7070.
func checkHTTPURL(flag, s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
	case u.Scheme != "http" && u.Scheme != "https":
		err = fmt.Errorf("scheme %q (want http or https)", u.Scheme)
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		err = errors.New("a query or fragment")
	default:
		if err = checkHost(u.Hostname()); err == nil && u.Port() != "" {
			err = checkPort(u.Port())
		}
	}
	if err != nil {
		return badArgument(flag, fmt.Errorf("%q is not a URL like http://127.0.0.1:7070: %w", s, err))
	}
	return nil
}
