package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func deleteCmd(g *globals, out io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "delete OBJECT",
		Short: "delete one object: its record, persisted state and replies, e.g. delete actor/dcounter/c1",
		Long: `Delete one object through locationd (DELETE /v1/objects/OBJECT; with TLS,
a certificate of the operate role). One etcd transaction removes its record, its
persisted state and its persisted replies; the node that hosted it drops the
instance when it sees the record gone. Nothing of it can come back.

A caller that knew the object is answered deleted (CODE_DELETED), never a
silent fresh start; the next call to the name creates a new object of a larger
object generation.

Refused, with nothing changed: a group, a member of a group (it must leave the
group first) and an object in a relocation (conflict: try again once it
settled); an unknown object is not_found.

Prints one line: deleted <object> generation <n> (owner <owner>), or with -o
json the API's answer.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			obj, err := parseObject("OBJECT", args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			d, raw, err := c.Delete(ctx, obj.String())
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(out, raw)
			}
			fmt.Fprintf(out, "deleted %s generation %d (owner %s)\n", d.Object, d.ObjectGeneration, dash(d.Owner))
			return nil
		},
	}
}
