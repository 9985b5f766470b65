// The op registry's rows: one line per layer kind, OP(ID, name) where ID
// becomes the layer_kind LK_<ID> (runtime/net.h) and name is the keyword of
// the description language and of the kind's descriptor `op_<name>`
// (runtime/op_<file>.c; runtime/ops.h says what a descriptor holds). Adding a
// layer kind is its files plus one line here. The order is the enum's order.
// No include guard: the includer defines OP() around each inclusion.
OP(CONV, conv)        // 2-D convolution, k x k kernel, stride, zero padding, optional bias
OP(BN, bn)            // batch norm over channels (spatial), gamma/beta + running stats
OP(RELU, relu)        // max(x, 0)
OP(MAXPOOL, maxpool)  // k x k window, stride, padding (pads never win)
OP(AVGPOOL, avgpool)  // k x k window, stride, padding (pads count as zeros, divisor k*k)
OP(GAP, gap)          // global average pool: (c, h, w) -> (c, 1, 1)
OP(ADD, add)          // elementwise sum of the outputs of src and srcs[1] (same shape)
OP(LINEAR, linear)    // fully connected; input flattened in (c, h, w) order
OP(CONCAT, concat)    // channels of its input and of the named earlier layers, joined in order
