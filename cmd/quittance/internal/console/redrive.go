package console

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
)

// maxBulkRedrive is how many obligations one bulk redrive may ask for:
// the page size's maximum, as for the other bulk changes.
const maxBulkRedrive = 200

// redriveRefusal says why compensation.Service.Redrive would refuse to
// redrive d, or "" when it would not: the service's own rule
// (compensation.CanRedrive), so the console offers the control and the
// bulk preview says what will happen. The service decides again on the
// locked row when the redrive is asked for, and its refusal is what is
// shown then.
func redriveRefusal(d ledger.Delegation) string {
	if _, msg, ok := formError(compensation.CanRedrive(d)); ok {
		return msg
	}
	return ""
}

// redriveReason is the reason field of a redrive form.
const redriveReason = "redrive_reason"

// redrive asks the org's agent for compensation again for one obligation,
// with a reason: the service behind POST /admin/v1/delegations/{id}/
// compensation/redrive, recorded as a compensation_redriven event.
func (c *Console) redrive(w http.ResponseWriter, r *http.Request, q *request) {
	c.delegationForm(w, r, q, "redrive", "redriven", func(id uuid.UUID) error {
		_, err := c.cfg.Compensation.Redrive(r.Context(), q.p, id, compensation.RedriveInput{Reason: r.PostFormValue(redriveReason)})
		return err
	})
}

// redriveItem is one selected obligation of a bulk redrive.
type redriveItem struct {
	Delegation ledger.Delegation
	// Refused says why it is not (or was not) redriven.
	Refused string
	// Done says it was redriven (after confirmation).
	Done bool
}

// bulkRedrivePage is the data of the bulk redrive preview and result.
type bulkRedrivePage struct {
	Items   []redriveItem
	IDs     []string
	Reason  string
	Back    string
	Changes int
	Refused int
	// Applied is true on the result of a confirmed redrive.
	Applied bool
}

// bulkRedrive previews a redrive of the selected obligations (which will
// be asked again and which cannot be) and, once confirmed, redrives each
// through the same service as the delegation page, one
// compensation_redriven event each. Each redrive is its own transaction:
// one refused at confirmation (its state changed since the preview)
// leaves the others redriven, and the result page says which.
func (c *Console) bulkRedrive(w http.ResponseWriter, r *http.Request, q *request, ids []uuid.UUID, back string) {
	ctx := r.Context()
	data := bulkRedrivePage{Reason: r.PostFormValue(redriveReason), Back: back}
	errs := map[string]string{}
	render := func(status int) {
		c.render(w, r, q, status, "bulk-redrive", view{Title: "Bulk redrive", Nav: "obligations", Errors: errs, Form: r.PostForm, Data: data})
	}
	if err := ledger.Authorize(q.p, ledger.ActionRedriveCompensation); err != nil {
		c.fail(w, r, q, err)
		return
	}
	ids = uniqueIDs(ids)
	switch {
	case len(ids) == 0:
		errs["ids"] = "select at least one obligation on the list first"
	case len(ids) > maxBulkRedrive:
		errs["ids"] = "select at most 200 obligations at once"
	}
	if strings.TrimSpace(data.Reason) == "" {
		errs[redriveReason] = "say why compensation is asked for again; it is recorded with each redrive"
	}
	if len(errs) > 0 {
		for _, id := range ids {
			data.IDs = append(data.IDs, id.String())
		}
		render(http.StatusUnprocessableEntity)
		return
	}
	confirm := r.PostFormValue("confirm") == "1"
	for _, id := range ids {
		d, err := c.cfg.Ledger.GetDelegation(ctx, q.p, id)
		if err != nil {
			c.fail(w, r, q, err)
			return
		}
		it := redriveItem{Delegation: d, Refused: redriveRefusal(d)}
		if confirm && it.Refused == "" {
			d, err := c.cfg.Compensation.Redrive(ctx, q.p, id, compensation.RedriveInput{Reason: data.Reason})
			if _, msg, ok := formError(err); ok {
				it.Refused = msg
			} else if err != nil {
				c.fail(w, r, q, err)
				return
			} else {
				it.Delegation, it.Done = d, true
			}
		}
		if it.Refused != "" {
			data.Refused++
		} else {
			data.Changes++
			data.IDs = append(data.IDs, id.String())
		}
		data.Items = append(data.Items, it)
	}
	if !confirm {
		render(http.StatusOK)
		return
	}
	c.log.InfoContext(ctx, "console bulk redrive", slog.Int("redriven", data.Changes), slog.Int("refused", data.Refused), slog.String("principal", q.p.Name))
	if data.Refused == 0 {
		redirect(w, r, withNotice(back, "bulk_redriven"))
		return
	}
	data.Applied = true
	render(http.StatusConflict)
}

func uniqueIDs(ids []uuid.UUID) []uuid.UUID {
	seen := map[uuid.UUID]bool{}
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
