// otpu_dstep: DSTEP, the Gated DeltaNet head step, in the DMA unit (isa reference; the golden
// otpu_core/sim/vector.py dstep). With S the rows x cols fp32 state in DRAM, q and k the two
// cols-vectors at qk, v the rows-vector, e = T[g] and beta = T[g + gs]:
//   kv = RDOT(S, k); delta = (v - kv * e) * beta; S' = S * e + delta (x) k; o = RDOT(S', q)
// with RDOT the VOP reduction tree (64 partials, each +0 + t[j] + t[j + 64] + ... in order, then
// the fold p[i] += p[i + n] for n = 32 .. 1), so the result is bit-identical to RDOT, MUL, SUB,
// MUL, OUTER, RDOT on the VPU. cols is a multiple of 64, so the tree has no pad terms.
//
// A stream of state beats (WPB = BB / 4 words each; the state is D-aligned and a row is whole
// beats) through a ring of RING_WORDS words:
//   - the reader requests the state's beats from the DSTEP's start, while the ring has room
//     (a beat's slot is free once its updated value has been sent back), and has the DRAM port
//     whenever it has a beat to request: the writes then keep the port busy to the end;
//   - k, e, beta, v and q come from TMEM in that order, 2 x LANES words a cycle, at the same time;
//   - stage K reduces each arrived beat against k (a beat a cycle), and at a row's end hands its
//     partials to its fold; the fold's sum gives the row's delta (from e, beta and v[r]);
//   - stage U takes a row whose delta is known, a beat a cycle: S' = S * e + delta * k into the
//     beat's slot (sent back from there) and S' * q into its partials; its fold gives o[r];
//   - the writer sends each updated beat when the reader has none to request.
// So the two stages and their folds work on different rows at once, and a state beat goes in and
// out each cycle. The unit holds the DRAM port for the whole instruction and completes when the
// last write is acknowledged and the last o is written, and no earlier than the model's stream
// engine (rows x cols / 8 + 200 cycles from its start, otpu_core/sim/costs.py): a zero state
// (DZERO) reads no DRAM, and this datapath would finish it sooner.
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
  output logic [2*LANES-1:0]       rd_en,   // the DMA's two read ports, LANES words each
  output logic [2*LANES-1:0][31:0] rd_addr,
  input  logic [1:0]               rd_gnt,
  input  logic [2*LANES-1:0][31:0] rd_data,
  output logic                   wr_en,
  output logic [31:0]            wr_addr,
  output logic [31:0]            wr_data
);
  `include "otpu_defs.svh"
  localparam int WPB = BB / 4;               // state words per beat: the stages' lanes
  localparam int CMAX = 256;                 // DSTEP_COLS at most
  localparam int RMAX = 256;                 // DSTEP_MAX_ROWS
  localparam int P = 64;                     // RDOT partials
  localparam int RING_WORDS = 1024;
  localparam int RB = RING_WORDS / WPB;      // ring beats
  localparam int DQ = 4;                     // deltas between the stages
  localparam int STREAM_WORDS_PER_CYCLE = 8; // the model's stream engine (costs.py)
  localparam int STREAM_FILL = 200;
  localparam logic [7:0] F_DZERO = 0;

  typedef enum logic [0:0] {X_IDLE, X_RUN} state_t;
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

  logic [31:0] qb [CMAX], kb [CMAX], vb [RMAX];
  logic [31:0] e_val, beta;
  logic [BB*8-1:0] ring [RB];
  logic [31:0] bpr, total, pace, elapsed;
  assign bpr = 32'(cols) / WPB;
  assign total = 32'(rows) * bpr;
  assign pace = 32'(rows) * 32'(cols) / STREAM_WORDS_PER_CYCLE + STREAM_FILL;

  // -- TMEM reads: k, T[g] and T[g + gs], v, then q (the order the stages use them; each waits only
  //    for the words it needs: vl counts the words landed). 2 x LANES words a cycle through the two
  //    ports; when the upper port is denied (TMEM_IMPL 3: the same banks) only the lower one's count,
  //    and the upper words are read again ---------------------------------------------------------------
  logic vec_issue;
  logic [31:0] vi, vl, vec_base, vec_k, vec_got, nvec, v0, q0;
  assign nvec = 2 * 32'(cols) + 32'(rows) + 2;
  assign v0 = 32'(cols) + 2;
  assign q0 = v0 + 32'(rows);
  function automatic logic [31:0] vec_addr(input logic [31:0] j);
    if (j < 32'(cols)) vec_addr = qk + 32'(cols) + j;
    else if (j == 32'(cols)) vec_addr = g;
    else if (j == 32'(cols) + 1) vec_addr = g + gs;
    else if (j < q0) vec_addr = va + j - v0;
    else vec_addr = qk + j - q0;
  endfunction
  assign vec_issue = state == X_RUN && vi < nvec;
  assign vec_got = !vec_issue || !rd_gnt[0] ? 0 : (rd_gnt[1] ? 2 * LANES : LANES);
  always_comb for (int l = 0; l < 2 * LANES; l++) begin
    rd_en[l] = vec_issue && vi + l < nvec;
    rd_addr[l] = vec_addr(vi + l);
  end

  // -- DRAM: the reader first, then the writer -------------------------------------------------------------
  logic [31:0] rb_iss, rb_arr, wb_iss, acks, u_beats;
  logic rd_can, wr_can;
  assign rd_can = state == X_RUN && !dzero && rb_iss < total && rb_iss - wb_iss < RB;
  assign wr_can = state == X_RUN && wb_iss < u_beats;
  assign req_valid = rd_can || wr_can;
  assign req_write = !rd_can;
  assign req_addr = sd + (rd_can ? rb_iss : wb_iss) * BB;
  assign req_wdata = ring[wb_iss % RB];
  assign req_wstrb = '1;
  assign req_bytes = 16'(BB);
  assign dram_pop = !rd_can && wr_can && req_ready && wb_iss + 1 == total;

  // -- stage K: kv = RDOT(S, k), a beat a cycle --------------------------------------------------------
  logic [31:0] k_g, k_r, k_c, kdone, u_r;
  logic k_go, k_last, fk_free, fk_valid, fk_ack;
  logic [31:0] fk_y;
  logic [P-1:0][31:0] pk;
  assign k_last = k_c + 1 == bpr;
  assign k_go = state == X_RUN && vl >= (k_c + 1) * WPB && k_r < 32'(rows) && (dzero || k_g < rb_arr) && (!k_last || fk_free);
  // -- stage U: S' = S * e + delta * k, o = RDOT(S', q) ------------------------------------------------
  logic [31:0] u_g, u_c, odone;
  logic u_go, u_last, fu_free, fu_valid;
  logic [31:0] fu_y, delta;
  logic [P-1:0][31:0] pu;
  logic [31:0] dq [DQ];
  assign u_last = u_c + 1 == bpr;
  assign delta = dq[u_r % DQ];
  assign u_go = state == X_RUN && vl >= q0 + (u_c + 1) * WPB && u_r < kdone && u_g < wb_iss + RB && (!u_last || fu_free);

  logic [WPB-1:0][31:0] s2;
  logic [WPB-1:0][31:0] k_acc, u_acc;
  for (genvar l = 0; l < WPB; l++) begin : g_lane
    logic [31:0] ck, cu, sk, su, m_sk, m_se, m_dk, m_q;
    assign ck = k_c * WPB + l;
    assign cu = u_c * WPB + l;
    assign sk = dzero ? 32'd0 : ring[k_g % RB][32 * l +: 32];   // DZERO: the state reads as +0
    assign su = dzero ? 32'd0 : ring[u_g % RB][32 * l +: 32];
    otpu_fp_mul u_sk (.a(sk), .b(kb[8'(ck)]), .y(m_sk));
    otpu_fp_add u_ka (.a(pk[6'(ck)]), .b(m_sk), .sub(1'b0), .y(k_acc[l]));
    otpu_fp_mul u_se (.a(su), .b(e_val), .y(m_se));
    otpu_fp_mul u_dk (.a(delta), .b(kb[8'(cu)]), .y(m_dk));
    otpu_fp_add u_s2 (.a(m_se), .b(m_dk), .sub(1'b0), .y(s2[l]));
    otpu_fp_mul u_q (.a(s2[l]), .b(qb[8'(cu)]), .y(m_q));
    otpu_fp_add u_ua (.a(pu[6'(cu)]), .b(m_q), .sub(1'b0), .y(u_acc[l]));
  end
  logic [P-1:0][31:0] k_part, u_part;          // the partials with this cycle's beat added
  always_comb begin
    k_part = pk;
    u_part = pu;
    for (int l = 0; l < WPB; l++) begin
      k_part[6'(k_c * WPB + l)] = k_acc[l];
      u_part[6'(u_c * WPB + l)] = u_acc[l];
    end
  end

  otpu_dstep_fold #(.NL(WPB)) u_fk (.clk, .rst, .load(k_go && k_last), .in_p(k_part), .free(fk_free),
                                    .valid(fk_valid), .ack(fk_ack), .y(fk_y));
  otpu_dstep_fold #(.NL(WPB)) u_fu (.clk, .rst, .load(u_go && u_last), .in_p(u_part), .free(fu_free),
                                    .valid(fu_valid), .ack(1'b1), .y(fu_y));

  // delta = (v - kv * e) * beta, as the row's kv leaves the fold (room for it between the stages)
  logic [31:0] kve, vmk, dl;
  assign fk_ack = kdone < u_r + DQ && vl > v0 + kdone;
  otpu_fp_mul u_kve (.a(fk_y), .b(e_val), .y(kve));
  otpu_fp_add u_vmk (.a(vb[8'(kdone)]), .b(kve), .sub(1'b1), .y(vmk));
  otpu_fp_mul u_dl (.a(vmk), .b(beta), .y(dl));

  assign wr_en = fu_valid;
  assign wr_addr = o + odone;
  assign wr_data = fu_y;

  logic [31:0] acks_now;
  assign acks_now = acks + (resp_valid && resp_write ? 1 : 0);
  assign finish = state == X_RUN && odone == 32'(rows) && wb_iss == total && acks_now >= total && elapsed + 1 >= pace;

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= X_IDLE;
      err <= 1'b0;
      err_code <= E_NONE;
      vec_k <= 0;
    end else begin
      elapsed <= elapsed + 1;
      vec_k <= vec_got;
      vec_base <= vi;
      vi <= vi + vec_got;
      if (vec_k != 0) begin
        for (int l = 0; l < 2 * LANES; l++) if (32'(l) < vec_k) begin
          logic [31:0] j;
          j = vec_base + l;
          if (j < 32'(cols)) kb[8'(j)] <= rd_data[l];
          else if (j == 32'(cols)) e_val <= rd_data[l];
          else if (j == 32'(cols) + 1) beta <= rd_data[l];
          else if (j < q0) vb[8'(j - v0)] <= rd_data[l];
          else if (j < nvec) qb[8'(j - q0)] <= rd_data[l];
        end
        vl <= vec_base + vec_k;
      end
      if (req_valid && req_ready) begin
        if (rd_can) rb_iss <= rb_iss + 1;
        else wb_iss <= wb_iss + 1;
      end
      if (resp_valid && !resp_write && state == X_RUN) begin
        ring[rb_arr % RB] <= resp_rdata;
        rb_arr <= rb_arr + 1;
      end
      if (resp_valid && resp_write) acks <= acks + 1;
      if (k_go) begin
        pk <= k_last ? '0 : k_part;
        k_g <= k_g + 1;
        k_c <= k_last ? 0 : k_c + 1;
        if (k_last) k_r <= k_r + 1;
      end
      if (fk_valid && fk_ack) begin
        dq[kdone % DQ] <= dl;
        kdone <= kdone + 1;
      end
      if (u_go) begin
        pu <= u_last ? '0 : u_part;
        ring[u_g % RB] <= s2;
        u_g <= u_g + 1;
        u_beats <= u_beats + 1;
        u_c <= u_last ? 0 : u_c + 1;
        if (u_last) u_r <= u_r + 1;
      end
      if (fu_valid) odone <= odone + 1;
      if (finish) state <= X_IDLE;
      if (start) begin
        w <= in_w;
        vi <= 0;
        vl <= 0;
        elapsed <= 0;
        rb_iss <= 0; rb_arr <= 0; wb_iss <= 0; acks <= 0; u_beats <= 0;
        k_g <= 0; k_r <= 0; k_c <= 0; kdone <= 0;
        u_g <= 0; u_r <= 0; u_c <= 0; odone <= 0;
        pk <= '0;
        pu <= '0;
        if (in_w[4][15:0] == 0 || 32'(in_w[4][15:0]) > RMAX || in_w[4][31:16] == 0 || in_w[4][31:16] > CMAX ||
            in_w[4][21:16] != 0 || in_w[1] % D != 0) begin
          err <= 1'b1;
          err_code <= E_SHAPE;
          state <= X_IDLE;
        end else state <= X_RUN;
      end
    end
  end
endmodule
