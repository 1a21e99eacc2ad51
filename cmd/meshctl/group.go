package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/keyspace"
)

func groupCmd(g *globals, out io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "group",
		Short: "create groups, have actors join and leave them, list their members",
		Long: `A group (group/<id>) is a set of member actors that live on one node and
move together: relocating the group (meshctl relocate group/g1 --to n2) moves
the group and every member in one relocation with one etcd commit transaction.
A member cannot be relocated alone (leave the group first). The membership is
kept in etcd on both sides (the group's members, each member's group) and
changed in one transaction.

A group holds at most the meshnodes' --max-txn-ops minus 4 members (124 with
etcd's default of 128 operations per transaction): a join beyond it is refused
with a conflict naming the limit. Raise etcd's --max-txn-ops (and
--max-request-bytes for very long names) on every member, and meshnode's flags
of the same names to match, to allow larger groups.

  meshctl group create group/g1 [--on n1]       an empty group, on n1 (default: a node locationd picks)
  meshctl group join group/g1 actor/counter/c1   c1 becomes a member; if it lives on another node than the
                                                group it is relocated there (Actor Join): the answer comes at
                                                READY and the source's clean-up finishes later (--wait waits
                                                for the relocation's end); an actor with no record yet is
                                                created on the group's node
  meshctl group leave group/g1 actor/counter/c1  c1 stays where it is, in no group
  meshctl group members group/g1                 the group's owner and members (also: meshctl call group/g1 members)`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{err: fmt.Errorf("unknown group command %q (want create, join, leave or members)", args[0])}
			}
			return usageError{err: fmt.Errorf("a group command is required: create, join, leave or members")}
		},
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	cmd.AddCommand(groupCreateCmd(g, out), groupJoinCmd(g, out), groupLeaveCmd(g, out), groupMembersCmd(g, out))
	for _, c := range cmd.Commands() {
		c.SilenceErrors, c.SilenceUsage = true, true
	}
	return cmd
}

func printGroup(g *globals, out io.Writer, grp api.Group, raw []byte) error {
	if g.output == "json" {
		return printJSON(out, raw)
	}
	rows := [][]string{{"GROUP", grp.Group}, {"OWNER", grp.Owner}, {"MEMBERS", fmt.Sprint(len(grp.Members))}}
	for _, m := range grp.Members {
		rows = append(rows, []string{"", m})
	}
	if grp.StoreVersion != 0 {
		rows = append(rows, []string{"STORE-VERSION", fmt.Sprint(grp.StoreVersion)})
	}
	if grp.Revision != 0 {
		rows = append(rows, []string{"OWNER-ALIVE", yesNo(grp.OwnerAlive)}, []string{"REVISION", fmt.Sprint(grp.Revision)})
	}
	if r := grp.Relocation; r != nil {
		rows = append(rows, []string{"RELOCATION", fmt.Sprintf("%s %s -> %s (%s at the answer)", r.RelocationID, dash(r.Source), dash(r.Target), dash(r.Phase))})
	}
	return table(out, rows)
}

func groupCreateCmd(g *globals, out io.Writer) *cobra.Command {
	var on string
	cmd := &cobra.Command{
		Use:   "create GROUP",
		Short: "create an empty group, e.g. group create group/g1 --on n1",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			grp, err := parseKind("GROUP", args[0], keyspace.KindGroup)
			if err != nil {
				return err
			}
			if on != "" {
				if err := checkOwnerID("--on", on); err != nil {
					return err
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			got, raw, err := c.CreateGroup(ctx, api.GroupRequest{Group: grp.String(), On: on})
			if err != nil {
				return err
			}
			return printGroup(g, out, got, raw)
		},
	}
	cmd.Flags().StringVar(&on, "on", "", "the node (owner id) to create it on (default: a live serving node locationd picks)")
	return cmd
}

// parseMember parses the GROUP and ACTOR of join and leave.
func parseMember(args []string) (group, actor keyspace.Object, err error) {
	if group, err = parseKind("GROUP", args[0], keyspace.KindGroup); err != nil {
		return group, actor, err
	}
	actor, err = parseKind("ACTOR", args[1], keyspace.KindActor)
	return group, actor, err
}

func groupJoinCmd(g *globals, out io.Writer) *cobra.Command {
	var joinTimeout time.Duration
	var wait bool
	cmd := &cobra.Command{
		Use:   "join GROUP ACTOR",
		Short: "make an actor a member, e.g. group join group/g1 actor/counter/c1",
		Long: `Make ACTOR a member of GROUP. If the actor lives on another node than the
group, it is relocated there (Actor Join): the answer comes once the group's
node has restored it (READY), and names that relocation; the commit (which
writes the membership) and the source's clean-up follow. --wait then waits for
the relocation's end and fails unless it completed (a relocation that does not
commit by its deadline leaves the actor where it was, in no group).`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if joinTimeout < 0 || joinTimeout > api.MaxRelocationTimeoutMs*time.Millisecond {
				return usageError{err: fmt.Errorf("--join-timeout %s must be between 0 (the node's default) and %s", joinTimeout, api.MaxRelocationTimeoutMs*time.Millisecond)}
			}
			group, actor, err := parseMember(args)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), max(g.timeout, joinTimeout+relocateWaitSlack))
			defer cancel()
			grp, raw, err := c.JoinGroup(ctx, api.GroupRequest{Group: group.String(), Actor: actor.String(), TimeoutMs: joinTimeout.Milliseconds()})
			if err != nil {
				return err
			}
			if err := printGroup(g, out, grp, raw); err != nil {
				return err
			}
			if !wait || grp.Relocation == nil {
				return nil
			}
			r, err := waitRelocationEnd(ctx, c, grp.Relocation.RelocationID, actor.String())
			if err != nil {
				return err
			}
			if g.output != "json" {
				fmt.Fprintf(out, "relocation %s: %s\n", r.RelocationID, r.Outcome)
			}
			if r.Outcome != api.OutcomeCompleted {
				return &api.Error{Code: r.Outcome, Message: fmt.Sprintf("the join's relocation %s did not complete: %s: %s; %s is not a member", r.RelocationID, dash(r.Code), dash(r.Message), actor)}
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&joinTimeout, "join-timeout", 0, "deadline of the Actor Join's relocation (0: the node's --relocation-timeout)")
	cmd.Flags().BoolVar(&wait, "wait", false, "after the answer, wait until the Actor Join's relocation ended")
	return cmd
}

// waitRelocationEnd polls the relocations of object until the source's side
// of id ended.
func waitRelocationEnd(ctx context.Context, c *client.Admin, id, object string) (api.Relocation, error) {
	ended := false
	for {
		rs, _, err := c.Relocations(ctx, api.RelocationsQuery{Object: object, InFlight: &ended})
		if err != nil {
			return api.Relocation{}, err
		}
		for _, r := range rs.Relocations {
			if r.RelocationID == id && r.Role == "source" {
				return r, nil
			}
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return api.Relocation{}, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("relocation %s of %s had not ended when the wait ran out: %v", id, object, ctx.Err())}
		case <-t.C:
		}
	}
}

func groupLeaveCmd(g *globals, out io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "leave GROUP ACTOR",
		Short: "remove an actor from its group, e.g. group leave group/g1 actor/counter/c1",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			group, actor, err := parseMember(args)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			grp, raw, err := c.LeaveGroup(ctx, api.GroupRequest{Group: group.String(), Actor: actor.String()})
			if err != nil {
				return err
			}
			return printGroup(g, out, grp, raw)
		},
	}
}

func groupMembersCmd(g *globals, out io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "members GROUP",
		Short: "show a group's owner and members, e.g. group members group/g1",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			group, err := parseKind("GROUP", args[0], keyspace.KindGroup)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			grp, raw, err := c.Group(ctx, group.String())
			if err != nil {
				return err
			}
			return printGroup(g, out, grp, raw)
		},
	}
}
