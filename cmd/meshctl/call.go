package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/pkg/actor/builtin"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// callOutput is the -o json form of a successful call.
type callOutput struct {
	Object      string          `json:"object"`
	Method      string          `json:"method"`
	OperationID string          `json:"operationId"`
	Payload     json.RawMessage `json:"payload"`
	Fence       authority.Fence `json:"fence"`
	// StoreVersion of the authority record the fence comes from.
	StoreVersion int64 `json:"storeVersion"`
	// Replayed: answered from the owner's de-duplication table (the
	// operation id had already been executed).
	Replayed bool `json:"replayed"`
}

// unknownOutcome wraps the error of a call that may or may not have been
// executed (its deadline passed): the operation id lets the user retry it
// safely with --op-id.
type unknownOutcome struct {
	err error
	op  wire.OperationID
}

func (e unknownOutcome) Error() string {
	return fmt.Sprintf("%v; outcome unknown: retry with --op-id %s", e.err, e.op)
}

func (e unknownOutcome) Unwrap() error { return e.err }

// notSent is a call that never left meshctl (no node listens there, or
// one end speaks TLS and the other not), with what to do about it.
func notSent(err error) error {
	hint := "pass --node or --etcd-endpoints"
	if errors.Is(err, client.ErrTLSMismatch) {
		hint = "pass --cacert, --cert and --key for a secured cluster, or none for a plaintext one"
	}
	return &api.Error{Code: api.CodeUnavailable, Message: err.Error() + ": " + hint}
}

// wireErrorMessage is "<code_name>: <message>" for an error carrying a
// *wire.Error: the code of the first one in its chain, then err's text
// without repeating the code.
func wireErrorMessage(err error, we *wire.Error) string {
	code := wire.CodeName(we.Code)
	s := err.Error()
	if strings.HasPrefix(s, code+": ") {
		return s
	}
	return code + ": " + s
}

// builtinMethods lists each built-in type with its methods, one per line.
func builtinMethods() string {
	var b strings.Builder
	for _, t := range builtin.Types() {
		fmt.Fprintf(&b, "  %-9s %s\n", t.Name, strings.Join(t.Methods, ", "))
	}
	return strings.TrimRight(b.String(), "\n")
}

func callCmd(g *globals, out io.Writer) *cobra.Command {
	var opID string
	cmd := &cobra.Command{
		Use:   "call OBJECT METHOD [ARG...]",
		Short: "call a method of an object, e.g. call actor/counter/c1 add 2",
		Long: `Call METHOD of OBJECT with string arguments, through the gateway --node
(any meshnode), or, with --etcd-endpoints, straight to the object's owner
routed from etcd.

Table output is the reply's JSON payload on one line on stdout (so
meshctl call ... | jq . works), and on stderr
  served by <owner>@<owner generation> objectGeneration=<g> authorityGeneration=<g>
with " (replayed)" when the owner answered from its de-duplication table.
The owner generation (after @) is the serving node's life: it grows at
each restart of that node. The authority generation is the object's: it
grows by one at every change of the object's owner (a relocation, a
recovery); the object generation grows when the object is re-created.
-o json prints {"object","method","operationId","payload","fence",
"storeVersion","replayed"}.

Every call carries an operation id (a UUIDv7, new unless --op-id gives one).
A call whose deadline passes has an unknown outcome: its error line names the
operation id; run the same call again with --op-id ID and it is executed at
most once. Put "--" before arguments that begin with "-", e.g.
  meshctl call actor/counter/c1 add -- -5

Built-in types: counter, register, list, bank, blob, ticker keep their state
in their owner's memory (a crash of the owner loses it: state_lost);
dcounter, dregister, dlist, dbank, dblob, dticker are the same types made
durable: every acknowledged change is in etcd before the reply, e.g.
  meshctl call actor/dbank/b1 transfer a0 a1 5 tx1
A change that would make a durable object's state larger than the node's
--durable-max-bytes is refused with state_too_large.

The built-in types' methods (a method of another name is refused with
unknown_method, which names them too):
` + builtinMethods(),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageError{err: fmt.Errorf("%s: requires OBJECT and METHOD, received %d arg(s)", cmd.CommandPath(), len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			obj, err := parseObject("OBJECT", args[0])
			if err != nil {
				return err
			}
			object, method := obj.String(), args[1]
			op := wire.NewOperationID()
			if cmd.Flags().Changed("op-id") {
				if op, err = wire.ParseOperationID(opID); err != nil {
					return usageError{err: fmt.Errorf("--op-id: %w", err)}
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			c, err := g.objectClient(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			argv := make([][]byte, len(args)-2)
			for i, a := range args[2:] {
				argv[i] = []byte(a)
			}
			r, err := c.CallBytes(ctx, op, object, method, argv)
			if err != nil {
				if errors.Is(err, client.ErrNoNode) || errors.Is(err, client.ErrTLSMismatch) {
					return notSent(err)
				}
				var we *wire.Error
				if !errors.As(err, &we) || we.Code == pb.Code_CODE_DEADLINE_EXCEEDED {
					return unknownOutcome{err: err, op: op}
				}
				return err
			}
			payload := bytes.TrimSpace(r.Payload)
			if len(payload) == 0 {
				payload = []byte("null")
			} else if !json.Valid(payload) {
				payload, _ = json.Marshal(string(r.Payload))
			}
			if g.output == "json" {
				b, err := json.Marshal(callOutput{
					Object: object, Method: method, OperationID: op.String(), Payload: payload,
					Fence: r.Fence, StoreVersion: r.StoreVersion, Replayed: r.Replayed,
				})
				if err != nil {
					return err
				}
				return printJSON(out, b)
			}
			var line bytes.Buffer
			if err := json.Compact(&line, payload); err != nil {
				return err
			}
			line.WriteByte('\n')
			if _, err := out.Write(line.Bytes()); err != nil {
				return err
			}
			// Who answered goes to stderr: stdout is the reply alone.
			served := fmt.Sprintf("served by %s objectGeneration=%d authorityGeneration=%d",
				r.Fence.Owner, r.Fence.ObjectGeneration, r.Fence.AuthorityGeneration)
			if r.Replayed {
				served += " (replayed)"
			}
			fmt.Fprintln(cmd.ErrOrStderr(), served)
			return nil
		},
	}
	cmd.Flags().StringVar(&opID, "op-id", "", "operation id (a UUIDv7) of an earlier call to retry: executed at most once")
	return cmd
}

// objectClient is the client of the objects: through the gateway --node, or
// routed from etcd with --etcd-endpoints.
func (g *globals) objectClient(ctx context.Context) (*client.Client, error) {
	cfg := client.Config{Timeout: g.timeout, TLS: g.tls, EtcdTLS: g.etcd}
	if len(g.etcdEndpoints) > 0 {
		cfg.EtcdEndpoints = g.etcdEndpoints
	} else {
		cfg.Nodes = []string{g.node} // host:port, checked by the root's PersistentPreRunE
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	c, err := client.New(ctx, cfg)
	switch {
	case errors.Is(err, client.ErrTLSFiles):
		return nil, usageError{err: err} // the files, as for every command that reads them
	case err != nil:
		return nil, &wire.Error{Code: pb.Code_CODE_UNAVAILABLE, Message: fmt.Sprintf("etcd %s: %v", strings.Join(g.etcdEndpoints, ","), err)}
	}
	return c, nil
}
