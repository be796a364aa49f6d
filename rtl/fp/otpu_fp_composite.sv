// otpu_fp_composite: the composite functions of otpu_core/fp32.py (EXP2, RECIP, RSQRT, LOG2) as
// one pipeline of STAGES multiply-add stages. Each stage has one fp32 multiplier and one adder;
// what they read and write is chosen per function (the step sequences of fp32.py, in order:
// the same roundings, so the results are bit-exact). One element enters per cycle when `en`;
// results leave LATENCY cycles later with their tag. `en` low freezes the whole pipeline. The
// set-up and the first steps, and the last steps and the specials, share a cycle: with five
// steps a cycle an element is two cycles in flight (the VPU's and the quantiser's stage counts).
module otpu_fp_composite #(
  parameter int TAG_W = 16,
  parameter int STEPS_PER_CYCLE = 5       // multiply-add steps between two pipeline registers (1 or 2
                                          // for a fast clock, at more cycles of latency)
) (
  input  logic             clk,
  input  logic             rst,
  input  logic             en,
  input  logic             in_valid,
  input  logic [1:0]       in_func,      // F_EXP2, F_RECIP, F_RSQRT, F_LOG2
  input  logic [31:0]      in_x,
  input  logic [TAG_W-1:0] in_tag,
  output logic             out_valid,
  output logic [31:0]      out_y,
  output logic [TAG_W-1:0] out_tag
);
  `include "otpu_fp_funcs.svh"
  localparam int STAGES = 10;
  localparam int LATENCY = (STAGES + STEPS_PER_CYCLE - 1) / STEPS_PER_CYCLE;
  localparam logic [1:0] F_EXP2 = 2'd0, F_RECIP = 2'd1, F_RSQRT = 2'd2, F_LOG2 = 2'd3;

  // one element's context as it moves down the pipeline
  typedef struct packed {
    logic             valid;
    logic [1:0]       func;
    logic [31:0]      x;      // the flushed input (specials at the end)
    logic [31:0]      a;      // exp2: xf; recip: significand; rsqrt: rescaled x; log2: m
    logic [31:0]      y;      // the running result (p, y, q)
    logic [31:0]      t;      // exp2: f; recip, rsqrt: the step factor; log2: t
    logic [31:0]      h;      // exp2: i2f(i); rsqrt: 0.5 x; log2: i2f(e)
    logic signed [9:0] n;     // exp2: i; recip: exponent field; rsqrt: k; log2: e
    logic [1:0]       flags;  // exp2: {lo, hi}; recip: {zero, big}; rsqrt: {bad, -}
    logic [TAG_W-1:0] tag;
  } ctx_t;

  ctx_t pre;
  // the stage registers are plain vectors: yosys (0.70) sizes an array of struct elements as one bit each
  localparam int CTX_W = $bits(pre);
  logic [CTX_W-1:0] st [STAGES + 1];
  logic [31:0] ma [STAGES + 1], mb [STAGES + 1], prod [STAGES + 1];
  logic [31:0] aa [STAGES + 1], ab [STAGES + 1], sum [STAGES + 1];
  logic        asub [STAGES + 1];

  // -- stage 0: the integer set-up of each function ------------------------------------------
  always_comb begin
    logic [31:0] x, xc, xf, xs;
    logic lo, hi, ge, bad;
    logic signed [9:0] k;
    logic [7:0] ex;
    pre = '0;
    pre.valid = in_valid;
    pre.func = in_func;
    pre.tag = in_tag;
    x = ftz(in_x);
    pre.x = x;
    ex = x[30:23];
    case (in_func)
      F_EXP2: begin
        xc = canon(x);
        lo = key_of(32'hC2FC0000) > key_of(xc);          // -126 > x
        hi = !(key_of(32'h43000000) > key_of(xc));       // not 128 > x (NaN too)
        xf = (lo || hi) ? 32'd0 : xc;
        pre.a = xf;
        pre.n = 10'(floor_small(xf));
        pre.h = i2f_small(16'(floor_small(xf)));
        pre.flags = {lo, hi};
      end
      F_RECIP: begin
        pre.a = {1'b0, 8'd127, x[22:0]};
        pre.y = RECIP_SEED - {1'b0, 8'd127, x[22:0]};
        pre.n = $signed({2'b00, ex});
        pre.flags = {x[30:0] == 0, x[30:0] >= 31'h7E800000};
      end
      F_RSQRT: begin
        bad = x[31] || x == 0 || x == POS_INF;
        k = bad ? 10'sd0 : (ex <= 2 ? 10'sd4 : ((ex >= 250 && ex <= 254) ? -10'sd4 : 10'sd0));
        xs = bad ? ONE : x + {k[8:0], 23'd0};
        pre.a = xs;
        pre.y = RSQRT_SEED - (xs >> 1);
        pre.n = k;
        pre.flags = {bad, 1'b0};
      end
      default: begin  // F_LOG2
        ge = x[22:0] >= LOG2_SQRT2_MANT;
        pre.n = ex == 0 ? 10'sd0 : $signed({2'b00, ex}) - 10'sd127 + (ge ? 10'sd1 : 10'sd0);
        pre.a = {1'b0, ge ? 8'd126 : 8'd127, x[22:0]};
        pre.h = i2f_small(16'(ex == 0 ? 10'sd0 : $signed({2'b00, ex}) - 10'sd127 + (ge ? 10'sd1 : 10'sd0)));
      end
    endcase
  end

  assign st[0] = pre;

  // -- stages 1..STAGES: one multiply and one add each ----------------------------------------
  for (genvar s = 1; s <= STAGES; s++) begin : g_stage
    ctx_t cur, nx;                                     // this stage's context in and out
    assign cur = st[s - 1];
    otpu_fp_mul u_mul (.a(ma[s]), .b(mb[s]), .y(prod[s]));
    otpu_fp_add u_add (.a(aa[s]), .b(ab[s]), .sub(asub[s]), .y(sum[s]));

    always_comb begin
      ma[s] = cur.y; mb[s] = cur.t; aa[s] = prod[s]; ab[s] = 32'd0; asub[s] = 1'b0;
      nx = cur;
      case (cur.func)
        F_EXP2:
          if (s == 1) begin                              // f = xf - i2f(i); p = C7
            aa[s] = cur.a; ab[s] = cur.h; asub[s] = 1'b1;
            nx.t = sum[s]; nx.y = exp2_c(7);
          end else if (s <= 8) begin                     // p = p * f + C(8 - s)
            ab[s] = exp2_c(8 - s);
            nx.y = sum[s];
          end
        F_RECIP:
          if (s == 1 || s == 3 || s == 5) begin          // t = (s == 5 ? 1 : 2) - a * y
            ma[s] = cur.a; mb[s] = cur.y; aa[s] = s == 5 ? ONE : TWO; ab[s] = prod[s]; asub[s] = 1'b1;
            nx.t = sum[s];
          end else if (s == 2 || s == 4) begin           // y = y * t
            nx.y = prod[s];
          end else if (s == 6) begin                     // y = y * t + y (the correction step)
            ab[s] = cur.y;
            nx.y = sum[s];
          end
        F_RSQRT:
          if (s == 1) begin                              // h = 0.5 * x'
            ma[s] = HALF; mb[s] = cur.a;
            nx.h = prod[s];
          end else if (s == 2 || s == 5 || s == 8) begin // t = y * y
            ma[s] = cur.y; mb[s] = cur.y;
            nx.t = prod[s];
          end else if (s == 3 || s == 6 || s == 9) begin // t = (s == 9 ? 0.5 : 1.5) - h * t
            ma[s] = cur.h; mb[s] = cur.t; aa[s] = s == 9 ? HALF : THREE_HALVES; ab[s] = prod[s]; asub[s] = 1'b1;
            nx.t = sum[s];
          end else if (s == 4 || s == 7) begin           // y = y * t
            nx.y = prod[s];
          end else begin                                 // y = y * t + y (the correction step)
            ab[s] = cur.y;
            nx.y = sum[s];
          end
        default:  // F_LOG2
          if (s == 1) begin                              // t = m - 1; q = C9
            aa[s] = cur.a; ab[s] = MINUS_ONE;
            nx.t = sum[s]; nx.y = log2_c(9);
          end else if (s <= 9) begin                     // q = q * t + C(10 - s)
            ab[s] = log2_c(10 - s);
            nx.y = sum[s];
          end else begin                                 // r = q * t + i2f(e)
            ab[s] = cur.h;
            nx.y = sum[s];
          end
      endcase
    end

    if (s % STEPS_PER_CYCLE == 0 || s == STAGES) begin : g_reg
      always_ff @(posedge clk) begin
        if (rst) st[s] <= '0;
        else if (en) st[s] <= nx;
      end
    end else begin : g_chain
      always_comb st[s] = nx;
    end
  end

  // -- the exponent and sign put back, specials -------------------------------------------------
  ctx_t last;
  logic [31:0] post;
  assign last = st[STAGES];
  always_comb begin
    case (last.func)
      F_EXP2: post = last.flags[1] ? 32'd0 : (last.flags[0] ? POS_INF : last.y + {last.n[8:0], 23'd0});
      F_RECIP: begin
        post = last.y + {(10'sd127 - last.n), 23'd0};
        post = (last.flags[0] ? 32'd0 : post) | {last.x[31], 31'd0};
        if (last.flags[1]) post = 32'd0;
      end
      F_RSQRT: post = last.flags[1] ? 32'd0 : last.y + {(last.n >>> 1), 23'd0};
      default: begin
        post = last.y;
        if (last.x[30:23] == 8'hFF) post = canon(last.x);
        if (last.x[31] && last.x[30:0] != 0) post = CANON_NAN;
        if (last.x[30:0] == 0) post = NEG_INF;
        post = ftz(post);
      end
    endcase
  end

  assign out_valid = last.valid;
  assign out_y = post;
  assign out_tag = last.tag;
endmodule
