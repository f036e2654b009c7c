/* shape_rnn.h - the attributes of the recurrent ops (LSTM, GRU, RNN), read
 * once for the shape rule (core/shape_rnn.c) and the CPU kernels
 * (runtime/cpu/rnn.c), so that the shapes a rule promises and the loops a
 * kernel runs cannot disagree. Not installed; private to the library.
 */
#ifndef PD_SHAPE_RNN_H
#define PD_SHAPE_RNN_H

#include "pd_internal.h"

typedef enum pd__rnn_cell { PD_RNN_LSTM = 0, PD_RNN_GRU, PD_RNN_SIMPLE } pd__rnn_cell;

/* One recurrent node's attributes, checked. */
typedef struct pd__rnn_attrs {
    pd__rnn_cell cell;
    int gates;      /* gate blocks in W and R: 4 (LSTM: i, o, f, c), 3 (GRU: z, r, h), 1 (RNN) */
    int ndir;       /* 1, or 2 for bidirectional */
    bool reverse;   /* direction "reverse" (the one direction runs backwards in time) */
    int64_t hidden; /* hidden_size; -1 when the attribute is absent (then R's last dim) */
    int layout;     /* 0: X (seq, batch, input); 1: X (batch, seq, input) */
    bool lbr;       /* GRU's linear_before_reset */
} pd__rnn_attrs;

/* Fills *a from n's attributes. Forms the kernels do not compute (other
 * activations, clip, input_forget=1) are PD_ERR_UNSUPPORTED naming the
 * attribute; the message has no node prefix. */
pd_status pd__rnn_attrs_read(const pd__node *n, pd__rnn_attrs *a);

#endif
