// otpu_dstep: DSTEP, the Gated DeltaNet head step, in the DMA unit (isa reference; the golden
// otpu_core/sim/vector.py dstep). With S the rows x cols fp32 state in DRAM, q and k the two
// cols-vectors at qk, v the rows-vector, e = T[g] and beta = T[g + gs]:
//   kv = RDOT(S, k); delta = (v - kv * e) * beta; S' = S * e + delta (x) k; o = RDOT(S', q)
// with RDOT the VOP reduction tree (64 partials, each +0 + t[j] + t[j + 64] + ... in order, then
// the fold p[i] += p[i + n] for n = 32 .. 1), so the result is bit-identical to RDOT, MUL, SUB,
// MUL, OUTER, RDOT on the VPU. cols is a multiple of 64, so the tree has no pad terms.
//
// q, k, v, e and beta are read into local buffers first (LANES words a cycle); then each row of
// S is read from DRAM (unless DZERO), reduced against k, updated in place and reduced against q,
// LANES columns a cycle, and written back; o[r] goes to TMEM as the row finishes. The unit holds
// the DRAM port for the whole instruction and completes when the last write is acknowledged.
module otpu_dstep
#(
  parameter int BB = 32,
  parameter int LANES = 4,
  parameter int D = 32
) (
  input  logic                   clk,
  input  logic                   rst,
  input  logic                   start,
  input  logic [7:0][31:0]       in_w,
  output logic                   busy,
  output logic                   finish,
  output logic                   err,
  output logic [7:0]             err_code,
  // DRAM
  output logic                   req_valid,
  output logic                   req_write,
  output logic [31:0]            req_addr,
  output logic [BB*8-1:0]        req_wdata,
  output logic [BB-1:0]          req_wstrb,
  output logic [15:0]            req_bytes,
  input  logic                   req_ready,
  output logic                   dram_pop,
  input  logic                   resp_valid,
  input  logic                   resp_write,
  input  logic [BB*8-1:0]        resp_rdata,
  // TMEM
  output logic [LANES-1:0]       rd_en,
  output logic [LANES-1:0][31:0] rd_addr,
  input  logic                   rd_gnt,
  input  logic [LANES-1:0][31:0] rd_data,
  output logic                   wr_en,
  output logic [31:0]            wr_addr,
  output logic [31:0]            wr_data
);
  `include "otpu_defs.svh"
  localparam int WPB = BB / 4;
  localparam int CMAX = 256;                 // DSTEP_COLS at most
  localparam int RMAX = 256;                 // DSTEP_MAX_ROWS
  localparam int P = 64;                     // RDOT partials
  localparam logic [7:0] F_DZERO = 0;

  typedef enum logic [3:0] {X_IDLE, X_VEC, X_SREAD, X_KV, X_FOLD, X_DELTA, X_OUT, X_SWRITE, X_DRAIN, X_DONE}
    state_t;
  state_t state;
  logic [7:0][31:0] w;
  logic [31:0] sd, qk, va, g, o, gs;
  logic [15:0] rows, cols;
  logic        dzero;
  assign sd = w[1]; assign qk = w[2]; assign va = w[3];
  assign rows = w[4][15:0]; assign cols = w[4][31:16];
  assign g = w[5]; assign o = w[6]; assign gs = w[7];
  assign dzero = w[0][24 + F_DZERO];
  assign busy = state != X_IDLE;
  assign finish = state == X_DONE;

  logic [31:0] qb [CMAX], kb [CMAX], sb [CMAX], vb [RMAX];
  logic [31:0] e_val, beta;
  logic [31:0] part [P];
  logic [15:0] r;
  logic [31:0] i;                            // element index of the current phase
  logic [31:0] nvec;                         // q, k, v words, then e and beta
  assign nvec = 2 * 32'(cols) + 32'(rows) + 2;
  logic        second;                       // the fold of the q reduction
  logic [31:0] kv, delta;
  logic [5:0]  f_n, f_i;

  // -- TMEM reads: q, k, v, then T[g] and T[g + gs] ------------------------------------------------------
  logic vec_issue, vec_pend;
  logic [31:0] vec_base;
  function automatic logic [31:0] vec_addr(input logic [31:0] j);
    if (j < 2 * 32'(cols)) vec_addr = qk + j;
    else if (j < 2 * 32'(cols) + 32'(rows)) vec_addr = va + j - 2 * 32'(cols);
    else if (j == 2 * 32'(cols) + 32'(rows)) vec_addr = g;
    else vec_addr = g + gs;
  endfunction
  assign vec_issue = state == X_VEC && i < nvec;
  always_comb for (int l = 0; l < LANES; l++) begin
    rd_en[l] = vec_issue && i + l < nvec;
    rd_addr[l] = vec_addr(i + l);
  end

  // -- the row's beats ------------------------------------------------------------------------------------
  logic [31:0] rw, b_first, b_last, b_next, got, writes, acks;
  assign rw = sd / 4 + 32'(r) * 32'(cols);
  assign b_first = rw * 4 / BB;
  assign b_last = ((rw + 32'(cols)) * 4 - 1) / BB;

  logic [BB*8-1:0] wbeat;
  logic [BB-1:0]   wstrb;
  always_comb begin
    wbeat = '0;
    wstrb = '0;
    for (int k = 0; k < WPB; k++) begin
      logic [31:0] wa;
      wa = b_next * WPB + k;
      if (wa >= rw && wa < rw + 32'(cols)) begin
        wbeat[32 * k +: 32] = sb[8'(wa - rw)];
        wstrb[4 * k +: 4] = 4'hF;
      end
    end
  end
  logic rd_issue, wr_issue, last_write;
  assign rd_issue = state == X_SREAD && b_next <= b_last;
  assign wr_issue = state == X_SWRITE && b_next <= b_last;
  assign last_write = wr_issue && b_next == b_last && 32'(r) + 1 >= 32'(rows);
  assign req_valid = rd_issue || wr_issue;
  assign req_write = wr_issue;
  assign req_addr = b_next * BB;
  assign req_wdata = wbeat;
  assign req_wstrb = wstrb;
  assign req_bytes = wr_issue ? 16'($countones(wstrb)) : 16'(4 * WPB);
  assign dram_pop = last_write && req_ready;

  // -- arithmetic: LANES columns a cycle ----------------------------------------------------------------
  logic [LANES-1:0][31:0] m_sk, m_se, m_dk, s2, m_q, acc_in, acc_out;
  for (genvar l = 0; l < LANES; l++) begin : g_lane
    logic [31:0] c, sv;
    assign c = i + l;
    assign sv = dzero ? 32'd0 : sb[8'(c)];      // DZERO: the state reads as +0 (DRAM is not read)
    otpu_fp_mul u_sk (.a(sv), .b(kb[8'(c)]), .y(m_sk[l]));
    otpu_fp_mul u_se (.a(sv), .b(e_val), .y(m_se[l]));
    otpu_fp_mul u_dk (.a(delta), .b(kb[8'(c)]), .y(m_dk[l]));
    otpu_fp_add u_s2 (.a(m_se[l]), .b(m_dk[l]), .sub(1'b0), .y(s2[l]));
    otpu_fp_mul u_q (.a(s2[l]), .b(qb[8'(c)]), .y(m_q[l]));
    assign acc_in[l] = state == X_OUT ? m_q[l] : m_sk[l];
    otpu_fp_add u_acc (.a(part[6'(c)]), .b(acc_in[l]), .sub(1'b0), .y(acc_out[l]));
  end
  // the fold: LANES pairs a cycle
  logic [LANES-1:0][31:0] f_y;
  for (genvar l = 0; l < LANES; l++) begin : g_fold
    otpu_fp_add u_f (.a(part[6'(f_i + l)]), .b(part[6'(f_i + l + f_n)]), .sub(1'b0), .y(f_y[l]));
  end
  // delta = (v - kv * e) * beta
  logic [31:0] kve, vmk, dl;
  otpu_fp_mul u_kve (.a(kv), .b(e_val), .y(kve));
  otpu_fp_add u_vmk (.a(vb[8'(r)]), .b(kve), .sub(1'b1), .y(vmk));
  otpu_fp_mul u_dl (.a(vmk), .b(beta), .y(dl));

  assign wr_en = state == X_FOLD && f_n == 0 && second;
  assign wr_addr = o + 32'(r);
  assign wr_data = part[0];

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= X_IDLE;
      err <= 1'b0;
      err_code <= E_NONE;
      vec_pend <= 1'b0;
    end else begin
      vec_pend <= vec_issue && rd_gnt;
      vec_base <= i;
      if (vec_pend)
        for (int l = 0; l < LANES; l++) begin
          logic [31:0] j;
          j = vec_base + l;
          if (j < 32'(cols)) qb[8'(j)] <= rd_data[l];
          else if (j < 2 * 32'(cols)) kb[8'(j - 32'(cols))] <= rd_data[l];
          else if (j < 2 * 32'(cols) + 32'(rows)) vb[8'(j - 2 * 32'(cols))] <= rd_data[l];
          else if (j == 2 * 32'(cols) + 32'(rows)) e_val <= rd_data[l];
          else if (j < nvec) beta <= rd_data[l];
        end
      if (resp_valid && resp_write) acks <= acks + 1;
      if (req_valid && req_ready) b_next <= b_next + 1;
      if (wr_issue && req_ready) writes <= writes + 1;
      case (state)
        X_VEC: begin
          if (vec_issue && rd_gnt) i <= i + LANES;
          if (!vec_issue && !vec_pend) begin
            state <= dzero ? X_KV : X_SREAD;
            b_next <= b_first;
            got <= 0;
            i <= 0;
          end
        end
        X_SREAD: if (resp_valid && !resp_write) begin
          for (int k = 0; k < WPB; k++) begin
            logic [31:0] wa;
            wa = (b_first + got) * WPB + k;
            if (wa >= rw && wa < rw + 32'(cols)) sb[8'(wa - rw)] <= resp_rdata[32 * k +: 32];
          end
          got <= got + 1;
          if (b_first + got == b_last) state <= X_KV;
        end
        X_KV, X_OUT: begin
          for (int l = 0; l < LANES; l++) begin
            part[6'(i + l)] <= acc_out[l];
            if (state == X_OUT) sb[8'(i + l)] <= s2[l];
          end
          i <= i + LANES;
          if (i + LANES >= 32'(cols)) begin
            state <= X_FOLD;
            second <= state == X_OUT;
            f_n <= 6'(P / 2);
            f_i <= 0;
          end
        end
        X_FOLD: begin
          if (f_n != 0) begin
            for (int l = 0; l < LANES; l++) if (32'(f_i) + l < 32'(f_n)) part[6'(f_i + l)] <= f_y[l];
            if (32'(f_i) + LANES >= 32'(f_n)) begin f_n <= f_n >> 1; f_i <= 0; end
            else f_i <= f_i + 6'(LANES);
          end else begin
            // p[0] is the reduction (written to o[r] this cycle by the second one)
            for (int q = 0; q < P; q++) part[q] <= 32'd0;
            i <= 0;
            if (!second) begin kv <= part[0]; state <= X_DELTA; end
            else begin state <= X_SWRITE; b_next <= b_first; end
          end
        end
        X_DELTA: begin delta <= dl; state <= X_OUT; end
        X_SWRITE: if (wr_issue && req_ready && b_next == b_last) begin
          if (32'(r) + 1 >= 32'(rows)) state <= X_DRAIN;
          else begin
            r <= r + 1;
            b_next <= ((sd / 4 + (32'(r) + 1) * 32'(cols)) * 4) / BB;
            got <= 0;
            state <= dzero ? X_KV : X_SREAD;
          end
        end
        X_DRAIN: if (acks + (resp_valid && resp_write ? 1 : 0) >= writes) state <= X_DONE;
        X_DONE: state <= X_IDLE;
        default: ;
      endcase
      if (start) begin
        w <= in_w;
        r <= 0;
        i <= 0;
        writes <= 0;
        acks <= 0;
        for (int q = 0; q < P; q++) part[q] <= 32'd0;
        if (in_w[4][15:0] == 0 || 32'(in_w[4][15:0]) > RMAX || in_w[4][31:16] == 0 || in_w[4][31:16] > CMAX ||
            in_w[4][21:16] != 0 || in_w[1] % D != 0) begin
          err <= 1'b1;
          err_code <= E_SHAPE;
          state <= X_IDLE;
        end else state <= X_VEC;
      end
    end
  end
endmodule
