package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// member runs one member hosting the counter kind until SIGTERM or SIGINT,
// then leaves the cluster gracefully (its actors stop; the next call to one
// of them activates it on another member, from a new counter).
func member(args []string) error {
	fs := flag.NewFlagSet("member", flag.ContinueOnError)
	endpoint := fs.String("etcd", "", "the etcd client URL")
	name := fs.String("name", "", "a name for the logs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *endpoint == "" {
		return fmt.Errorf("--etcd is required")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	c, err := newCluster(*endpoint, true)
	if err != nil {
		return err
	}
	c.StartMember()
	fmt.Printf("ready %s %s\n", *name, c.ActorSystem.Address())
	<-sig
	c.Shutdown(true)
	return nil
}
