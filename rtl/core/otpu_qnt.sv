// otpu_qnt: the quantiser: QACT (TMEM fp32 rows -> ACT RAM int8 with scales; ROW, CSCALE,
// RSCALE and the project's SUB sub-block offsets) and QST (TMEM fp32 rows -> DRAM int8 bytes at
// dst + r*drs + c*es and fp32 scales; ROW, HALF). Arithmetic as fp32.quantize and
// formats.quantize_suboffsets.
//
// Each group (a D-block, or a whole row in ROW mode) takes two passes over TMEM, LANES elements
// per cycle: the first finds amax (and each D/4 sub-block's amax for SUB) of the scaled source,
// then s = amax * fp32(1/127) and inv = 127 * recip(amax) (the composite pipeline's RECIP), the
// second re-reads the source and writes the codes: a D-block of the ACT RAM per block, or bytes
// assembled into DRAM beats with strobes (a partly written beat merges in the memory).
module otpu_qnt
#(
  parameter int D = 32,
  parameter int ROWS = 2,
  parameter int LANES = 4,
  parameter int ACT_BLOCKS = 16,
  parameter int BB = 32
) (
  input  logic                   clk,
  input  logic                   rst,
  input  logic                   in_valid,
  input  logic [7:0][31:0]       in_w,
  output logic                   take,
  output logic                   release_o,
  output logic                   done,
  output logic                   err,
  output logic [7:0]             err_code,
  // DRAM (QST)
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
  // ACT RAM
  output logic                   act_we,
  output logic [$clog2(ROWS)-1:0] act_wrow,
  output logic [$clog2(ACT_BLOCKS)-1:0] act_wblk,
  output logic [D*8-1:0]         act_wq,
  output logic [31:0]            act_wscale,
  output logic [15:0]            act_wsub,
  // TMEM: the source (port X) and the column / row scales (port S)
  output logic [1:0][LANES-1:0]       rd_en,
  output logic [1:0][LANES-1:0][31:0] rd_addr,
  input  logic [1:0]                  rd_gnt,
  input  logic [1:0][LANES-1:0][31:0] rd_data
);
  `include "otpu_defs.svh"
  `include "otpu_fp_funcs.svh"
  localparam int SUBW = D / 4;              // elements per sub-block
  localparam int NSUBS = 4 * ACT_BLOCKS;    // sub-blocks of a row (ROW mode)
  localparam int BQ = 8;                    // assembled DRAM beats waiting

  typedef enum logic [3:0] {S_IDLE, S_ROWSCALE, S_P1, S_RECIP, S_P2, S_NEXT, S_DRAIN, S_DONE, S_ERR} state_t;
  state_t state;

  logic [7:0][31:0] w;
  logic        is_qst, row_mode, cscale, rscale, sub, half;
  logic [15:0] rows, kb;
  logic [7:0]  ab;
  logic [31:0] src, srs, dst, sdst, drs, es, cs_addr, rs_addr;
  assign is_qst = w[0][7:0] == OP_QST;
  assign row_mode = w[0][24 + F_ROW];
  assign cscale = !is_qst && w[0][24 + F_CSCALE];
  assign rscale = !is_qst && w[0][24 + F_RSCALE];
  assign sub = !is_qst && w[0][24 + F_SUB];
  assign half = is_qst && w[0][24 + F_HALF];
  assign src = w[1];
  assign rows = is_qst ? w[4][15:0] : {8'd0, w[2][7:0]};
  assign kb = is_qst ? w[4][31:16] : w[2][31:16];
  assign ab = w[2][15:8];
  assign srs = is_qst ? w[5] : w[3];
  assign dst = w[2];
  assign sdst = w[3];
  assign drs = w[6];
  assign es = w[7];
  assign cs_addr = w[4];
  assign rs_addr = w[5];

  assign take = (state == S_IDLE || state == S_DONE) && in_valid;
  assign done = state == S_DONE;
  assign release_o = done;

  // -- position --------------------------------------------------------------------------------------
  logic [15:0] r;                            // row
  logic [15:0] k;                            // block (block mode) of the group
  logic [31:0] e;                            // next element of the group to issue
  logic [31:0] glen, gbase;                  // group length and first column
  logic [31:0] rs_val;                       // T[rscale + r]
  assign glen = row_mode ? 32'(kb) * D : D;
  assign gbase = row_mode ? 0 : 32'(k) * D;

  logic pass_issue;
  logic [LANES-1:0] l_en;
  always_comb begin
    for (int l = 0; l < LANES; l++) begin
      l_en[l] = e + l < glen;
      rd_addr[0][l] = src + 32'(r) * srs + gbase + e + l;
      rd_addr[1][l] = cs_addr + gbase + e + l;
    end
    if (state == S_ROWSCALE) rd_addr[1][0] = rs_addr + 32'(r);
  end

  // the beat queue must have room for what one cycle of pass 2 can produce
  logic [$clog2(BQ+1)-1:0] bq_n;
  assign pass_issue = (state == S_P1 || (state == S_P2 && (!is_qst || 32'(bq_n) + LANES + 2 <= BQ))) && e < glen;
  always_comb begin
    rd_en = '0;
    if (pass_issue) begin
      rd_en[0] = l_en;
      if (cscale) rd_en[1] = l_en;
    end
    if (state == S_ROWSCALE) rd_en[1][0] = 1'b1;
  end

  // -- stage 1: scaled source values -------------------------------------------------------------------
  logic [LANES-1:0] s1_en;
  logic [31:0]      s1_e;
  logic             s1_p2;
  logic [LANES-1:0][31:0] xs, xr, xc;
  always_ff @(posedge clk) begin
    s1_en <= pass_issue && &rd_gnt ? l_en : '0;
    s1_e <= e;
    s1_p2 <= state == S_P2;
  end
  for (genvar l = 0; l < LANES; l++) begin : g_scale
    otpu_fp_mul u_rs (.a(rd_data[0][l]), .b(rs_val), .y(xr[l]));
    otpu_fp_mul u_cs (.a(rscale ? xr[l] : rd_data[0][l]), .b(rd_data[1][l]), .y(xc[l]));
  end
  always_comb for (int l = 0; l < LANES; l++)
    xs[l] = cscale ? xc[l] : (rscale ? xr[l] : ftz(rd_data[0][l]));

  // -- pass 1: amax of the group and of each sub-block ------------------------------------------------------
  logic [30:0] amax;
  logic [30:0] sub_amax [NSUBS];
  logic [31:0] s_val, inv;

  // -- the reciprocal (composite pipeline) --------------------------------------------------------------------
  logic        rc_valid;
  logic [31:0] rc_y;
  logic [15:0] rc_tag;
  logic        rc_in;
  otpu_fp_composite #(.TAG_W(16)) u_recip (.clk, .rst, .en(1'b1), .in_valid(rc_in), .in_func(2'd1),
                                           .in_x({1'b0, amax}), .in_tag(16'd0), .out_valid(rc_valid),
                                           .out_y(rc_y), .out_tag(rc_tag));
  logic [31:0] inv_full, s_full;
  otpu_fp_mul u_inv (.a(F127), .b(rc_y), .y(inv_full));
  otpu_fp_mul u_s (.a({1'b0, amax}), .b(INV127), .y(s_full));

  // -- pass 2: codes -------------------------------------------------------------------------------------------------
  logic [LANES-1:0][31:0] t_b, inv_b, qx;
  logic [LANES-1:0][2:0]  e_b;
  logic [LANES-1:0][7:0]  code;
  for (genvar l = 0; l < LANES; l++) begin : g_code
    otpu_fp_mul u_t (.a({1'b0, sub_amax[(gbase + s1_e + l) / SUBW]}), .b(inv), .y(t_b[l]));
    otpu_fp_mul u_invb (.a(inv), .b({1'b0, 8'(127 + e_b[l]), 23'd0}), .y(inv_b[l]));
    otpu_fp_mul u_q (.a(xs[l]), .b(sub ? inv_b[l] : inv), .y(qx[l]));
  end
  // the largest e in 0..7 with t <= 127 * 2^-e (0 for t = 0 or NaN): sub-block offsets
  function automatic logic [2:0] sub_offset(input logic [31:0] t);
    logic [2:0] n;
    n = 0;
    for (int j = 1; j <= 7; j++) if (t <= {1'b0, 8'(133 - j), 23'h7E0000}) n = 3'(j);
    sub_offset = (t == 0 || is_nan(t)) ? 3'd0 : n;
  endfunction
  always_comb for (int l = 0; l < LANES; l++) begin
    e_b[l] = sub_offset(t_b[l]);
    code[l] = q8(qx[l]);
  end

  // ACT block buffer and its side word
  logic [D*8-1:0] blk_q;
  logic [15:0]    blk_side;

  // -- QST: beats with strobes --------------------------------------------------------------------------------------
  logic [BB*8-1:0] bq_data [BQ];
  logic [BB-1:0]   bq_strb [BQ];
  logic [31:0]     bq_beat [BQ];
  logic [BB*8-1:0] cb_data;
  logic [BB-1:0]   cb_strb;
  logic [31:0]     cb_beat;
  logic            cb_any;
  logic [31:0]     writes, acks;
  logic            all_queued;
  assign req_valid = is_qst && bq_n != 0 && (state == S_P2 || state == S_NEXT || state == S_P1 || state == S_RECIP ||
                                              state == S_ROWSCALE || state == S_DRAIN);
  assign req_write = 1'b1;
  assign req_addr = bq_beat[0] * BB;
  assign req_wdata = bq_data[0];
  assign req_wstrb = bq_strb[0];
  assign req_bytes = 16'($countones(bq_strb[0]));
  assign dram_pop = (state == S_DRAIN && all_queued && bq_n == 1 && req_ready) ||
                    (state == S_DRAIN && all_queued && bq_n == 0 && writes == 0 && !cb_any);

  logic [31:0] ncols;
  assign ncols = half ? 32'(kb) * D / 2 : 32'(kb) * D;

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= S_IDLE;
      err <= 1'b0;
      err_code <= E_NONE;
      bq_n <= 0;
      act_we <= 1'b0;
      rc_in <= 1'b0;
    end else begin
      logic [BB*8-1:0] qd [BQ];
      logic [BB-1:0]   qs [BQ];
      logic [31:0]     qb [BQ];
      logic [$clog2(BQ+1)-1:0] n;
      logic [BB*8-1:0] cd;
      logic [BB-1:0]   cs;
      logic [31:0]     cbt;
      logic            ca;
      act_we <= 1'b0;
      rc_in <= 1'b0;
      for (int i = 0; i < BQ; i++) begin qd[i] = bq_data[i]; qs[i] = bq_strb[i]; qb[i] = bq_beat[i]; end
      n = bq_n;
      cd = cb_data; cs = cb_strb; cbt = cb_beat; ca = cb_any;
      if (req_valid && req_ready) begin
        for (int i = 0; i < BQ - 1; i++) begin qd[i] = qd[i + 1]; qs[i] = qs[i + 1]; qb[i] = qb[i + 1]; end
        n = n - 1;
      end
      if (resp_valid && resp_write) acks <= acks + 1;

      if (pass_issue && &rd_gnt) e <= e + LANES;

      // stage 1 results
      if (|s1_en && !s1_p2) begin
        logic [30:0] am;
        logic [30:0] sam [NSUBS];
        am = amax;
        sam = sub_amax;
        for (int l = 0; l < LANES; l++)
          if (s1_en[l]) begin
            logic [31:0] sb;
            if (xs[l][30:0] > am) am = xs[l][30:0];
            sb = (gbase + s1_e + l) / SUBW;
            if (xs[l][30:0] > sam[sb]) sam[sb] = xs[l][30:0];
          end
        amax <= am;
        sub_amax <= sam;
      end
      if (|s1_en && s1_p2) begin
        logic [D*8-1:0] bqv;
        logic [15:0] side;
        bqv = blk_q;
        side = blk_side;
        for (int l = 0; l < LANES; l++)
          if (s1_en[l]) begin
            logic [31:0] col;
            col = gbase + s1_e + l;
            bqv[8 * (col % D) +: 8] = code[l];
            side[3 * ((col % D) / SUBW) +: 3] = sub ? e_b[l] : 3'd0;
            if (is_qst && col < ncols) begin
              logic [31:0] a;
              a = dst + 32'(r) * drs + col * es;
              if (ca && a / BB != cbt) begin qd[n] = cd; qs[n] = cs; qb[n] = cbt; n = n + 1; cs = '0; ca = 1'b0; end
              cbt = a / BB;
              ca = 1'b1;
              cd[8 * (a % BB) +: 8] = code[l];
              cs[a % BB] = 1'b1;
            end
            if (!is_qst && (col % D == D - 1 || col + 1 == 32'(kb) * D)) begin
              act_we <= 1'b1;
              act_wrow <= $bits(act_wrow)'(r);
              act_wblk <= $bits(act_wblk)'(32'(ab) + col / D);
              act_wq <= bqv;
              act_wscale <= s_val;
              act_wsub <= sub ? (side | 16'h8000) : 16'd0;
            end
          end
        blk_q <= bqv;
        blk_side <= side;
      end

      case (state)
        S_ROWSCALE: if (rd_gnt[1]) state <= S_P1;
        S_P1: if (e >= glen && s1_en == 0 && !(pass_issue)) begin
          // amax is complete once the last stage-1 group has been merged
          state <= S_RECIP;
          rc_in <= 1'b1;
        end
        S_RECIP: if (rc_valid) begin
          s_val <= amax == 0 ? 32'd0 : s_full;
          inv <= amax == 0 ? 32'd0 : inv_full;
          e <= 0;
          state <= S_P2;
        end
        S_P2: if (e >= glen && !pass_issue && s1_en == 0) state <= S_NEXT;
        S_NEXT: begin
          // the group's scale word (QST), then the next group or row
          if (is_qst) begin
            logic [31:0] a;
            a = row_mode ? sdst + 4 * 32'(r) : sdst + 4 * (32'(r) * 32'(kb) + 32'(k));
            if (ca && a / BB != cbt) begin qd[n] = cd; qs[n] = cs; qb[n] = cbt; n = n + 1; cs = '0; ca = 1'b0; end
            cbt = a / BB;
            ca = 1'b1;
            cd[8 * (a % BB) +: 32] = s_val;
            cs[a % BB +: 4] = 4'hF;
          end
          amax <= 0;
          for (int i = 0; i < NSUBS; i++) sub_amax[i] <= 0;
          e <= 0;
          if (!row_mode && 32'(k) + 1 < 32'(kb)) begin
            k <= k + 1;
            state <= S_P1;
          end else if (32'(r) + 1 < 32'(rows)) begin
            r <= r + 1;
            k <= 0;
            state <= rscale ? S_ROWSCALE : S_P1;
          end else if (is_qst) begin
            if (ca) begin qd[n] = cd; qs[n] = cs; qb[n] = cbt; n = n + 1; cs = '0; ca = 1'b0; end
            state <= S_DRAIN;
          end else state <= S_DONE;
        end
        S_DRAIN: if (bq_n == 0 && acks == writes) state <= S_DONE;
        S_DONE: state <= S_IDLE;
        default: ;
      endcase
      if (req_valid && req_ready) writes <= writes + 1;

      for (int i = 0; i < BQ; i++) begin bq_data[i] <= qd[i]; bq_strb[i] <= qs[i]; bq_beat[i] <= qb[i]; end
      bq_n <= n;
      cb_data <= cd; cb_strb <= cs; cb_beat <= cbt; cb_any <= ca;

      if (take) begin
        w <= in_w;
        r <= 0;
        k <= 0;
        e <= 0;
        amax <= 0;
        for (int i = 0; i < NSUBS; i++) sub_amax[i] <= 0;
        writes <= 0;
        acks <= 0;
        cb_any <= 1'b0;
        cb_strb <= '0;
        blk_side <= 0;
        if (in_w[0][7:0] == OP_QACT && in_w[0][24 + F_DUP]) begin
          err <= 1'b1;
          err_code <= E_UNSUPPORTED;
          state <= S_ERR;
        end else
          state <= (in_w[0][7:0] == OP_QACT && in_w[0][24 + F_RSCALE]) ? S_ROWSCALE : S_P1;
      end
    end
  end

  // the row scale arrives the cycle after its read
  logic rs_pending;
  always_ff @(posedge clk) begin
    rs_pending <= state == S_ROWSCALE && rd_gnt[1];
    if (rs_pending) rs_val <= rd_data[1][0];
  end
  assign all_queued = state == S_DRAIN;
endmodule
