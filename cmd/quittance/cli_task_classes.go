package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// taskClass is a task class as the admin API has it.
type taskClass struct {
	Name                string    `json:"name"`
	EffectCapable       bool      `json:"effect_capable"`
	GateOn              []string  `json:"gate_on"`
	CompensationTimeout string    `json:"compensation_timeout"`
	UpdatedAt           time.Time `json:"updated_at"`
}

// The defaults of a class that is not registered (ledger.UnknownTaskClass):
// effect-capable, gated on canceled and failed, 72h.
var (
	defaultGateOn              = []string{"canceled", "failed"}
	defaultCompensationTimeout = "72h0m0s"
)

// newTaskClassesCommand is `quittance task-classes`: list, show and change
// the task classes that decide the compensation gate and timeout.
func newTaskClassesCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "task-classes",
		Short: "Administer task classes: the compensation gate and timeout of each kind of work",
		Long: "A task class says whether a kind of delegated work can commit effects at the remote org, which terminal " +
			"statuses gate its hold, and how long compensation is sought before the obligation becomes " +
			"compensation_unconfirmed. A class that is not registered counts as effect-capable, gated on canceled " +
			"and failed, with a 72h timeout.",
	}
	cmd.AddCommand(newTaskClassListCommand(getenv, stdout), newTaskClassShowCommand(getenv, stdout),
		newTaskClassSetCommand(getenv, stdout), newTaskClassPolicyCommand(getenv, stdout))
	return cmd
}

// newTaskClassListCommand is `quittance task-classes list`.
func newTaskClassListCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var output string
	list := &cobra.Command{
		Use:   "list",
		Short: "List the registered task classes",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return usageError{errors.New("-o must be table or json")}
			}
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			var out struct {
				TaskClasses []taskClass `json:"task_classes"`
			}
			if err := c.call(cmd.Context(), http.MethodGet, "/admin/v1/task-classes", nil, nil, &out); err != nil {
				return err
			}
			if output == "json" {
				return printJSON(stdout, out.TaskClasses)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tEFFECT_CAPABLE\tGATE_ON\tCOMPENSATION_TIMEOUT\tUPDATED_AT")
			for _, tc := range out.TaskClasses {
				gate := strings.Join(tc.GateOn, ",")
				if gate == "" {
					gate = "-"
				}
				fmt.Fprintf(tw, "%s\t%t\t%s\t%s\t%s\n", tc.Name, tc.EffectCapable, gate, tc.CompensationTimeout,
					tc.UpdatedAt.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return list
}

// newTaskClassShowCommand is `quittance task-classes show NAME`.
func newTaskClassShowCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show one task class, as JSON",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			var tc taskClass
			if err := c.call(cmd.Context(), http.MethodGet, "/admin/v1/task-classes/"+url.PathEscape(args[0]), nil, nil, &tc); err != nil {
				return err
			}
			return printJSON(stdout, tc)
		},
	}
}

// newTaskClassSetCommand is `quittance task-classes set NAME`: it reads
// the class (the unregistered defaults when there is none), changes what
// the flags give and writes it back.
func newTaskClassSetCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var (
		effectCapable bool
		gateOn        []string
		timeout       string
	)
	set := &cobra.Command{
		Use:   "set NAME [--effect-capable=true|false] [--gate-on canceled,failed] [--compensation-timeout 72h]",
		Short: "Register a task class or change it (on-call); flags not given keep their current value",
		Long: "set registers the class, or replaces it keeping every setting whose flag is not given. A new class " +
			"starts from the defaults of an unregistered one: effect-capable, gated on canceled and failed, 72h. " +
			"--gate-on '' gates on nothing. The change applies to delegations whose task ends after it; " +
			"obligations already waiting keep their deadline.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			flags := cmd.Flags()
			if err := checkTaskClassFlags(flags.Changed, gateOn, timeout); err != nil {
				return err
			}
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			path := "/admin/v1/task-classes/" + url.PathEscape(args[0])
			current := taskClass{EffectCapable: true, GateOn: defaultGateOn, CompensationTimeout: defaultCompensationTimeout}
			err = c.call(cmd.Context(), http.MethodGet, path, nil, nil, &current)
			var apiErr *apiError
			if err != nil && !(errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound) {
				return err
			}
			if flags.Changed("effect-capable") {
				current.EffectCapable = effectCapable
			}
			if flags.Changed("gate-on") {
				current.GateOn = gateOn
			}
			if flags.Changed("compensation-timeout") {
				current.CompensationTimeout = timeout
			}
			if current.GateOn == nil {
				current.GateOn = []string{}
			}
			// A change of the gate or the timeout waits for a second
			// on-call approver: the answer then names the pending change.
			var out struct {
				taskClass
				PendingChange json.RawMessage `json:"pending_change,omitempty"`
			}
			err = c.call(cmd.Context(), http.MethodPut, path, nil, map[string]any{
				"effect_capable": current.EffectCapable, "gate_on": current.GateOn,
				"compensation_timeout": current.CompensationTimeout,
			}, &out)
			if err != nil {
				return err
			}
			return printJSON(stdout, out)
		},
	}
	set.Flags().BoolVar(&effectCapable, "effect-capable", true, "whether the work can commit effects at the remote org")
	set.Flags().StringSliceVar(&gateOn, "gate-on", nil, "terminal statuses that gate the hold: canceled, failed, both, or ''")
	set.Flags().StringVar(&timeout, "compensation-timeout", "", "how long compensation is sought, a Go duration (72h, 90m)")
	return set
}

// checkTaskClassFlags checks task-classes set's flags: at least one is
// given (changed says which), the timeout is a positive duration and the
// gate lists only canceled and failed.
func checkTaskClassFlags(changed func(name string) bool, gateOn []string, timeout string) error {
	if !changed("effect-capable") && !changed("gate-on") && !changed("compensation-timeout") {
		return usageError{errors.New("nothing to set: give --effect-capable, --gate-on or --compensation-timeout")}
	}
	if changed("compensation-timeout") {
		d, err := time.ParseDuration(timeout)
		if err != nil || d <= 0 {
			return usageError{fmt.Errorf("--compensation-timeout %q is not a positive duration such as 72h or 90m", timeout)}
		}
	}
	for _, s := range gateOn {
		if s != "canceled" && s != "failed" {
			return usageError{fmt.Errorf("--gate-on may list only canceled and failed, not %q", s)}
		}
	}
	return nil
}
